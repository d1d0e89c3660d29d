#!/usr/bin/env bash
# train_ckpt_write_failure_test.sh - a node dies while its ckptd is writing a checkpoint: the
# daemons are paced (ckptd --max-mb-s) so that each persist takes seconds, and the node is
# crashed while its daemon reports a snapshot in flight. That step never completes; the
# requeued job resumes from the previous complete checkpoint (never from the partial one)
# and still ends bit-identical to the uninterrupted reference. full_shard, so that every
# rank (and so the failed node's daemon) writes a real share of the tensors.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_ckpt_write_failure_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
FAIL_AFTER_STEP=19

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_CKPTD_ARGS="--max-mb-s 0.4 --threads 1"

JOB_ID="$(e2e_submit wfail)"
wait_for_file_lines "${WORK_DIR}/wfail/metrics.jsonl" "${FAIL_AFTER_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(e2e_non_batch_node "${JOB_ID}")" || fail "could not pick a node to fail"
in_flight() {
  "${E2E_BIN}/ckptctl" status "${WORK_DIR}/wfail" --node "${node}" --json 2>/dev/null |
    grep -q '"snapshots_in_flight":[1-9]'
}
wait_for 60 "a snapshot in flight in the ckptd of ${node}" in_flight
writing="$("${E2E_BIN}/ckptctl" status "${WORK_DIR}/wfail" --node "${node}" --json |
  grep -o '"last_submitted_step":[0-9]*' | cut -d: -f2 | sort -n | tail -n1)"
log "fail-node ${node} while its ckptd writes step ${writing}"
e2e_fail_node "${node}"
wait_for_restarts "${JOB_ID}" 1 120
e2e_revive_node
e2e_wait_done "${JOB_ID}" wfail

resumed="$(grep -o 'resume: restored step [0-9]*' "${WORK_DIR}"/wfail-*.out | tail -n1 | awk '{print $4}')"
[[ -n "${resumed}" ]] || fail "the requeued job did not resume from a checkpoint"
((resumed < writing)) ||
  fail "resumed from step ${resumed}, but step ${writing} was still being written when the node died"
log "step ${writing} was being written when ${node} died; resumed from step ${resumed}"
e2e_expect_restore_from_disk wfail "${node}"
e2e_expect_identical wfail
log "PASS: node failure during a checkpoint write -> previous complete checkpoint -> bit-identical"
PASSED=1
