#!/usr/bin/env bash
# train_rank_kill_test.sh - a rank crash with healthy nodes on the local Slurm cluster: one
# `ftrain train` rank is SIGKILLed mid-run; srun --kill-on-bad-exit ends the step, train.sh
# checks the nodes (healthy) and restarts the training step inside the same allocation
# (no requeue, no queue wait: the job never leaves RUNNING); the ranks find their node's
# ckptd still alive and restore from its in-memory snapshot; the result is bit-identical to
# the uninterrupted reference. The run keeps its checkpoints outside the run directory
# (ckpt.root in FTRAIN_ARGS, as a user sets it, not FTRAIN_CKPT_ROOT): the daemons must write
# there, train.sh's lost-work figure and `ftrain report` must find them there (both once read
# RUN/checkpoints and silently reported no lost work). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_rank_kill_test"
KILL_AT_STEP=17

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_RESTART_BACKOFF_S=1

CUSTOM_ROOT="${WORK_DIR}/elsewhere/ckpts"
JOB_ID="$(FTRAIN_ARGS="${E2E_TRAIN_ARGS} --ckpt.root=${CUSTOM_ROOT}" e2e_submit kill)"
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
[[ -e "${WORK_DIR}/kill/checkpoints" ]] && fail "something wrote RUN/checkpoints although ckpt.root is ${CUSTOM_ROOT}"
grep -q "root ${CUSTOM_ROOT}" "${WORK_DIR}"/kill/logs/ckptd-*.log ||
  fail "the daemons did not write into ckpt.root: $(head -n 3 "${WORK_DIR}"/kill/logs/ckptd-*.log)"
[[ "$("${E2E_BIN}/ftrain" paths "${WORK_DIR}/kill" --get checkpoints)" == "${CUSTOM_ROOT}" ]] ||
  fail "ftrain paths does not resolve the run's ckpt.root"
lost="$(grep -o '"event":"restarted".*' "${WORK_DIR}/kill/restarts.jsonl" | grep -o '"lost_s":[0-9.]*' | cut -d: -f2)"
awk -v l="${lost}" 'BEGIN { exit !(l > 0) }' ||
  fail "the restart record's lost_s is '${lost}': the work since the checkpoint in ${CUSTOM_ROOT} was not counted"
report="$("${E2E_BIN}/ftrain" report "${WORK_DIR}/kill" --json)" || fail "ftrain report failed"
CUSTOM_ROOT="${CUSTOM_ROOT}" python3 -c 'import json,os,sys
c=json.load(sys.stdin)["checkpoints"]
sys.exit(0 if c["root"] == os.environ["CUSTOM_ROOT"] and c["complete_in_root"] > 0 else 1)' <<<"${report}" ||
  fail "ftrain report found no checkpoints under ${CUSTOM_ROOT}"
e2e_expect_identical kill "${CUSTOM_ROOT}"
log "PASS: rank SIGKILL -> in-allocation restart from ckptd memory -> bit-identical"
PASSED=1
