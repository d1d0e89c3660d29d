#!/usr/bin/env bash
# train_preempt_test.sh - preemption / time limit on the local Slurm cluster: USR1 to the
# batch shell (what `#SBATCH --signal=B:USR1@lead` delivers) is forwarded to every rank, they
# checkpoint at the next step boundary (waiting until the daemons committed it) and exit 75,
# train.sh requeues the job itself (`scontrol requeue`), and the next start resumes
# bit-identically to the uninterrupted reference. Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_preempt_test"
SIGNAL_AT_STEP=18        # between two checkpoints (every 5 steps)

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup

log "preempted job: SIGUSR1 to the batch shell at step ~${SIGNAL_AT_STEP}"
JOB_ID="$(e2e_submit pre)"
wait_for_file_lines "${WORK_DIR}/pre/metrics.jsonl" "${SIGNAL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
scancel --signal=USR1 --batch "${JOB_ID}"
wait_for_restarts "${JOB_ID}" 1 120
e2e_wait_done "${JOB_ID}" pre

grep -q '"event":"stopped","cause":"preempted"' "${WORK_DIR}/pre/restarts.jsonl" ||
  fail "no preemption record: $(cat "${WORK_DIR}/pre/restarts.jsonl")"
grep -q 'exiting with 75' "${WORK_DIR}"/pre-*.out || fail "ranks did not checkpoint and exit 75"
# The stop checkpoint is off the 5-step grid and was committed before the ranks exited.
stop_step="$(grep -o 'checkpointed step [0-9]*' "${WORK_DIR}"/pre-*.out | head -n1 | awk '{print $3}')"
[[ -n "${stop_step}" ]] || fail "no 'checkpointed step' line"
# At or after the step the signal came at: a trainer that replayed an older checkpoint fails.
((stop_step >= SIGNAL_AT_STEP)) ||
  fail "the stop checkpoint (step ${stop_step}) is before the signal (step ${SIGNAL_AT_STEP})"
grep -q "resume: restored step ${stop_step} " "${WORK_DIR}"/pre-*.out ||
  fail "the requeued job did not resume from the stop checkpoint (step ${stop_step})"
e2e_expect_identical pre
# The daemons were stopped gracefully before the requeue and at the end (SIGTERM to the
# agents, not a step cancel): each finished its snapshots and unlinked its shared memory.
for f in "${WORK_DIR}"/pre/logs/ckptd-*.log; do
  [[ "$(grep -c 'ckptd: stopped' "${f}")" == 2 ]] ||
    fail "${f##*/}: expected 2 clean stops (requeue, end): $(grep -E 'serving|stopp' "${f}")"
done
log "PASS: USR1 -> checkpoint at step ${stop_step} -> exit 75 -> scontrol requeue -> resumed bit-identically"
PASSED=1
