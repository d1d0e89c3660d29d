#!/usr/bin/env bash
# train_rank_kill_test.sh - a rank crash with healthy nodes on the local Slurm cluster: one
# `ftrain train` rank is SIGKILLed mid-run; srun --kill-on-bad-exit ends the step, train.sh
# checks the nodes (healthy) and restarts the training step inside the same allocation
# (no requeue, no queue wait: the job never leaves RUNNING); the ranks find their node's
# ckptd still alive and restore from its in-memory snapshot; the result is bit-identical to
# the uninterrupted reference. Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_rank_kill_test"
KILL_AT_STEP=17

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_RESTART_BACKOFF_S=1

JOB_ID="$(e2e_submit kill)"
wait_for_file_lines "${WORK_DIR}/kill/metrics.jsonl" "${KILL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
pids="$(e2e_rank_pids kill)"
[[ "$(wc -w <<<"${pids}")" == 4 ]] || fail "expected 4 ranks, found pids: ${pids}"
victim="$(awk '{print $NF}' <<<"${pids}" | tail -n1)"
t_kill="$(now_s)"
log "SIGKILL rank pid ${victim}"
kill -KILL "${victim}"
# The job must stay RUNNING (no requeue) until it completes.
states=""
until job_state_matches "${JOB_ID}" 'COMPLETED|FAILED|CANCELLED|TIMEOUT'; do
  states+="$(job_state "${JOB_ID}") "
  if [[ -z "${t_back:-}" ]] && (($(wc -l <"${WORK_DIR}/kill/metrics.jsonl") > KILL_AT_STEP + 5)); then
    t_back="$(now_s)"
  fi
  sleep "${SLURM_TEST_POLL_S}"
done
e2e_wait_done "${JOB_ID}" kill
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued (Restarts=$(e2e_restarts "${JOB_ID}"))"
grep -Eq 'PENDING|REQUEUE' <<<"${states}" && fail "the job left RUNNING: ${states}"
grep -q '"event":"restarted","cause":"rank_failure"' "${WORK_DIR}/kill/restarts.jsonl" ||
  fail "no in-job restart record: $(cat "${WORK_DIR}/kill/restarts.jsonl")"
grep -Eq 'restored [1-9][0-9]* bytes from ckptd memory' "${WORK_DIR}"/kill-*.out ||
  fail "the in-job restart did not restore from the daemons' memory"
log "kill -> training again (5 steps past the kill point) in $(elapsed_s "${t_kill}" "${t_back:-${t_kill}}") s, without leaving the allocation"
e2e_expect_identical kill
log "PASS: rank SIGKILL -> in-allocation restart from ckptd memory -> bit-identical"
PASSED=1
