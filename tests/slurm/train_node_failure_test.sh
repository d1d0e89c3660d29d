#!/usr/bin/env bash
# train_node_failure_test.sh - the product's promise end to end on the local Slurm cluster:
# `sbatch slurm/train.sh` (2 nodes x 2 ranks, tiny model, hybrid sharding, checkpoints every
# 5 steps through one ckptd per node) with a node crash mid-training (SIGKILL of the node's
# slurmd and every process of its job steps, its ckptd included) is requeued by Slurm, resumes
# from the newest complete checkpoint, and ends bit-identical to the uninterrupted job
# (`ckptctl diff` exits 0) with the same loss at every step. The node's memory dies with it
# (each local node has a private /dev/shm), so the resumed state comes from disk.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_node_failure_test"
FAIL_AT_STEP=22          # crash a node once metrics.jsonl has this many steps

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup

log "job with a node failure at step ~${FAIL_AT_STEP}"
JOB_ID="$(e2e_submit fail)"
wait_for_file_lines "${WORK_DIR}/fail/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(e2e_non_batch_node "${JOB_ID}")" || fail "could not pick a node to fail"
t_fail="$(now_s)"
log "fail-node ${node} (the batch host stays up)"
e2e_fail_node "${node}"
wait_for_restarts "${JOB_ID}" 1 120
t_requeue="$(now_s)"
e2e_revive_node
e2e_wait_done "${JOB_ID}" fail
t_done="$(now_s)"
log "node failure -> requeue $(elapsed_s "${t_fail}" "${t_requeue}") s; -> finished $(elapsed_s "${t_fail}" "${t_done}") s"

grep -q '"event":"requeued","cause":"node_failure"' "${WORK_DIR}/fail/restarts.jsonl" ||
  fail "no requeue record in ${WORK_DIR}/fail/restarts.jsonl: $(cat "${WORK_DIR}/fail/restarts.jsonl")"
grep -q 'restart count 1' "${WORK_DIR}"/fail-*.out || fail "the requeued start did not log SLURM_RESTART_COUNT=1"
grep -q 'handed to ckptd' "${WORK_DIR}"/fail-*.out || fail "the ranks did not checkpoint through ckptd"
e2e_expect_restore_from_disk fail "${node}"
e2e_expect_identical fail
log "PASS: requeued after a node failure and finished bit-identical to the reference"
PASSED=1
