#!/usr/bin/env bash
# train_crash_loop_test.sh - a rank failure that every start repeats, on healthy nodes (a GPU
# that passes the health probe but faults, a crash at the same point of every start): a rank
# of every new training step is SIGKILLed as soon as it appears, before it can commit a new
# checkpoint. train.sh restarts the step in place (FTRAIN_MAX_INJOB_RESTARTS=1 here), then
# requeues the job; after FTRAIN_MAX_FAILED_STARTS (2 here) such starts in a row with no newer
# checkpoint in between the job must end FAILED, saying why and what to do, with a `failed`
# record (cause rank_failure_repeated) naming the checkpoint, instead of requeueing for ever
# (FTRAIN_PREFLIGHT=0: no pre-flight commcheck would catch it either). Then the user submits
# again with the cause gone: a new budget, and the run ends bit-identical to the reference.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_crash_loop_test"

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_MAX_INJOB_RESTARTS=1 FTRAIN_MAX_FAILED_STARTS=2 FTRAIN_RESTART_BACKOFF_S=1
export FTRAIN_PREFLIGHT=0
run="${WORK_DIR}/loop"

# SIGKILLs a rank of every training step of the run as soon as its ranks appear (polling
# every 50 ms; a step whose ranks show up in two polls loses two), logging each to WORK_DIR/kills.
kill_every_start() {
  local seen=" " pid now
  while :; do
    now="$(e2e_rank_pids loop | tr '\n' ' ')"
    for pid in ${now}; do
      [[ "${seen}" == *" ${pid} "* ]] && continue
      kill -KILL "${pid}" 2>/dev/null && echo "${pid}" >>"${WORK_DIR}/kills"
      seen+="${now}"
      break
    done
    sleep 0.05
  done
}

JOB_ID="$(e2e_submit loop)"
wait_for_file_lines "${run}/metrics.jsonl" 12 "${E2E_JOB_TIMEOUT_S}"
kill_every_start &
E2E_BG_PIDS=($!)
log "killing a rank of every start of job ${JOB_ID} from step ~12 on"
wait_for_job_state "${JOB_ID}" 'COMPLETED|FAILED|CANCELLED|TIMEOUT' 240
kill "${E2E_BG_PIDS[@]}"
wait "${E2E_BG_PIDS[@]}" 2>/dev/null || true
E2E_BG_PIDS=()
state="$(job_state "${JOB_ID}")"
[[ "${state}" == FAILED ]] || fail "job ${JOB_ID} ended ${state}, not FAILED: $(cat "${run}/restarts.jsonl")"
[[ "$(e2e_restarts "${JOB_ID}")" == 1 ]] ||
  fail "job ${JOB_ID} was requeued $(e2e_restarts "${JOB_ID}") times, not once (2 failed starts)"
# 2 starts x 2 tries: an in-job restart and then the requeue or the end, in each start.
n_restarted="$(grep -c '"event":"restarted","cause":"rank_failure"' "${run}/restarts.jsonl" || true)"
n_requeue="$(grep -c '"event":"step_failed","cause":"rank_failure_requeue"' "${run}/restarts.jsonl" || true)"
[[ "${n_restarted} ${n_requeue}" == "2 1" ]] ||
  fail "${n_restarted} in-job restarts and ${n_requeue} requeues, not 2 and 1: $(cat "${run}/restarts.jsonl")"
newest="$("${E2E_BIN}/ckptctl" latest "${run}/checkpoints")" || fail "no complete checkpoint in ${run}"
rec="$(grep '"event":"failed"' "${run}/restarts.jsonl")" || fail "no failed record: $(cat "${run}/restarts.jsonl")"
[[ "${rec}" == *'"cause":"rank_failure_repeated"'* && "${rec}" == *'"failed_starts":2,'* &&
  "${rec}" == *"\"checkpoint\":\"${newest##*/}\""* ]] ||
  fail "the failed record does not name the cause, the 2 starts and ${newest##*/}: ${rec}"
grep -q "FAILED: the training step failed .* in 2 starts in a row .* no checkpoint newer than ${newest##*/} .*submit again" \
  "${WORK_DIR}/loop-${JOB_ID}.out" || fail "the job's output does not say why it stopped and what to do"
report="$("${E2E_BIN}/ftrain" report "${run}")" || fail "ftrain report ${run} failed"
grep -q "^state *FAILED (rank_failure_repeated) .*job ${JOB_ID}: .*submit again: it resumes from the checkpoint of step $((10#${newest##*step-}))\$" <<<"${report}" ||
  fail "ftrain report does not say that the run FAILED and what to do: $(head -n 4 <<<"${report}")"
log "job ${JOB_ID}: $(wc -l <"${WORK_DIR}/kills") ranks killed in 4 steps of 2 starts at ${newest##*/}, then FAILED (no requeue loop)"

# The cause fixed (no more kills), the user submits again: a new budget; it resumes and ends
# bit-identical.
first_job="${JOB_ID}"
JOB_ID="$(e2e_submit loop)"
e2e_wait_done "${JOB_ID}" loop
sed -n '/"event":"failed"/,$p' "${run}/restarts.jsonl" | grep -q "\"job\":\"${JOB_ID}\",.*\"event\":\"started\",\"cause\":\"initial\"" ||
  fail "the new submission's start was not recorded: $(cat "${run}/restarts.jsonl")"
e2e_expect_identical loop
log "PASS: a failure every start repeats ended job ${first_job} FAILED after 2 starts; resubmitted, job ${JOB_ID} resumed from ${newest##*/}; bit-identical"
PASSED=1
