#!/usr/bin/env bash
# train_signals_test.sh - what train.sh does with signals and exit codes, on the local Slurm:
#   1. a configuration error (the trainer exits 2): the job FAILS with the trainer's message in
#      its output and a "failed/config_error" record, without any restart or requeue;
#   2. USR1 during the in-job restart back-off (after a rank was killed): nothing new to save,
#      so train.sh requeues at once (well before the back-off would end), and the requeued job
#      finishes bit-identical to the uninterrupted reference.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_signals_test"
KILL_AT_STEP=12
BACKOFF_S=60             # long: the USR1 must cut it short

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup

log "1. a configuration error fails the job, no restart loop"
JOB_ID="$(FTRAIN_ARGS="${E2E_TRAIN_ARGS} --dist.sharding=zero9" e2e_submit cfg)"
wait_for_job_state "${JOB_ID}" "COMPLETED|FAILED|CANCELLED|TIMEOUT" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_state "${JOB_ID}")" == FAILED ]] || fail "job ${JOB_ID} ended $(job_state "${JOB_ID}"), not FAILED"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "a configuration error was requeued"
grep -q 'FAILED: the trainer refused its configuration or input' "${WORK_DIR}"/cfg-*.out ||
  fail "no failure line: $(tail -n 20 "${WORK_DIR}"/cfg-*.out)"
grep -q 'dist.sharding' "${WORK_DIR}"/cfg-*.out || fail "the trainer's message is not in the job output"
grep -q 'in-job restart' "${WORK_DIR}"/cfg-*.out && fail "train.sh restarted a configuration error"
grep -q '"event":"failed","cause":"config_error"' "${WORK_DIR}/cfg/restarts.jsonl" ||
  fail "no config_error record: $(cat "${WORK_DIR}/cfg/restarts.jsonl")"
JOB_ID=""

log "2. USR1 during the restart back-off (${BACKOFF_S} s) requeues at once"
export FTRAIN_RESTART_BACKOFF_S="${BACKOFF_S}"
JOB_ID="$(e2e_submit sig)"
wait_for_file_lines "${WORK_DIR}/sig/metrics.jsonl" "${KILL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
victim="$(e2e_rank_pids sig | tail -n1)"
[[ -n "${victim}" ]] || fail "no rank to kill"
kill -KILL "${victim}"
wait_for 120 "the in-job restart record" grep -q '"event":"restarted"' "${WORK_DIR}/sig/restarts.jsonl"
t_sig="$(now_s)"
scancel --signal=USR1 --batch "${JOB_ID}"
# Not a duration (two loaded cores): the evidence that USR1 cut the back-off short is train.sh's
# record that it stopped *during* it (after the back-off the trainer would run again and a
# USR1 would checkpoint it instead).
wait_for_restarts "${JOB_ID}" 1 "${E2E_JOB_TIMEOUT_S}"
t_requeued="$(now_s)"
grep -q '"event":"stopped","cause":"preempted","during":"the restart back-off"' \
  "${WORK_DIR}/sig/restarts.jsonl" || fail "no back-off stop record: $(cat "${WORK_DIR}/sig/restarts.jsonl")"
e2e_wait_done "${JOB_ID}" sig
e2e_expect_identical sig
log "PASS: config error -> FAILED without restarts; USR1 in back-off -> requeued in $(elapsed_s "${t_sig}" "${t_requeued}") s -> bit-identical"
PASSED=1
