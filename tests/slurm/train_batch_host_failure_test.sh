#!/usr/bin/env bash
# train_batch_host_failure_test.sh - the node that runs the batch script (train.sh itself)
# crashes at a random step: Slurm requeues the job, the revived node must be able to launch
# the batch script again (no stale job spool: "launch failed requeued held" would hold the job
# forever), and the run resumes from the newest complete checkpoint and ends bit-identical to
# the uninterrupted job, its state read from disk (the node's memory died with it). The step
# is random; FTRAIN_TEST_SEED reproduces a run (printed).
# FTRAIN_TEST_SPARE_NODES=1 runs it with a hot spare (3 nodes, --no-kill): Slurm then keeps the
# job RUNNING without its batch script, and the node agents must requeue it.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_batch_host_failure_test"
SPARES="${FTRAIN_TEST_SPARE_NODES:-0}"
SEED="${FTRAIN_TEST_SEED:-$(( $(date +%s) % 100000 ))}"
FAIL_AT_STEP=$(( 8 + SEED % 40 ))   # 8..47 of 60: before, between and after checkpoints

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
submit_args=()
if ((SPARES > 0)); then
  (($(cluster_nodes | wc -l) >= 2 + SPARES)) || skip "needs a cluster of $((2 + SPARES)) nodes"
  export FTRAIN_SPARE_NODES="${SPARES}"
  submit_args=(--nodes=$((2 + SPARES)) --no-kill)
fi

log "seed ${SEED}: crash the batch host at step ~${FAIL_AT_STEP} (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit batch "${submit_args[@]}")"
wait_for_file_lines "${WORK_DIR}/batch/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(job_field "${JOB_ID}" BatchHost)"
[[ -n "${node}" ]] || fail "job ${JOB_ID} has no batch host"
e2e_freeze_ranks batch  # the failure lands before the run ends however fast it trains
log "fail-node ${node} (the batch host: train.sh dies with it)"
e2e_fail_node "${node}"
e2e_thaw_ranks batch
wait_for_restarts "${JOB_ID}" 1 120
e2e_revive_node
e2e_wait_done "${JOB_ID}" batch
grep -q 'restart count 1' "${WORK_DIR}"/batch-*.out || fail "the requeued start did not log SLURM_RESTART_COUNT=1"
if ((SPARES > 0)); then
  grep -q '"event":"step_failed","cause":"node_failure","node":"'"${node}"'","batch_host":true' \
    "${WORK_DIR}/batch/restarts.jsonl" || fail "no agent record of the batch host failure"
fi
# A failure before the step-5 checkpoint completed leaves nothing to resume from.
e2e_expect_restore_from_disk batch "${node}" 1
e2e_expect_identical batch
log "PASS (${SPARES} spares): the batch host crashed at step ${FAIL_AT_STEP}; requeued, relaunched and bit-identical"
PASSED=1
