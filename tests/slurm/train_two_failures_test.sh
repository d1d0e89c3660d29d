#!/usr/bin/env bash
# train_two_failures_test.sh - two failures in one run on the local Slurm cluster: a rank is
# SIGKILLed (in-allocation restart), then a node crashes (Slurm requeue onto a new
# allocation); the run still ends bit-identical to the uninterrupted reference, and
# restarts.jsonl records both with their causes. After the rank kill the daemons' memory may
# serve the restore; after the node crash everything comes from disk.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_two_failures_test"
KILL_AT_STEP=12
FAIL_AT_STEP=38

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_RESTART_BACKOFF_S=1

JOB_ID="$(e2e_submit two)"
wait_for_file_lines "${WORK_DIR}/two/metrics.jsonl" "${KILL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
victim="$(e2e_rank_pids two | head -n1)"
[[ -n "${victim}" ]] || fail "no rank to kill"
log "failure 1: SIGKILL rank pid ${victim} at step ~${KILL_AT_STEP}"
kill -KILL "${victim}"
wait_for 120 "the in-job restart record" grep -q '"event":"restarted"' "${WORK_DIR}/two/restarts.jsonl"
wait_for_file_lines "${WORK_DIR}/two/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(e2e_non_batch_node "${JOB_ID}")" || fail "could not pick a node to fail"
log "failure 2: fail-node ${node} at step ~${FAIL_AT_STEP}"
e2e_fail_node "${node}"
wait_for_restarts "${JOB_ID}" 1 120
e2e_revive_node
e2e_wait_done "${JOB_ID}" two

grep -q '"event":"restarted","cause":"rank_failure"' "${WORK_DIR}/two/restarts.jsonl" ||
  fail "no rank-failure record: $(cat "${WORK_DIR}/two/restarts.jsonl")"
grep -q '"event":"requeued","cause":"node_failure"' "${WORK_DIR}/two/restarts.jsonl" ||
  fail "no node-failure record: $(cat "${WORK_DIR}/two/restarts.jsonl")"
e2e_expect_restore_from_disk two "${node}"
e2e_expect_identical two
log "PASS: rank kill + node failure in one run -> bit-identical"
PASSED=1
