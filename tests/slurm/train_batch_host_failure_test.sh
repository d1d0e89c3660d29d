#!/usr/bin/env bash
# train_batch_host_failure_test.sh - the node that runs the batch script (train.sh itself)
# crashes at a random step. Without spares and under the local cluster's short timeouts, with
# ftrain's detection off (FTRAIN_DETECT=0: the fallback, deterministic here): Slurm requeues
# the job, the revived node must be able to launch
# the batch script again (no stale job spool: "launch failed requeued held" would hold the job
# forever), and the run resumes from the newest complete checkpoint and ends bit-identical to
# the uninterrupted job, its state read from disk (the node's memory died with it). The step
# is random; FTRAIN_TEST_SEED reproduces a run (printed).
# FTRAIN_TEST_SPARE_NODES=1 runs it with a hot spare (3 nodes, --no-kill): Slurm then keeps the
# job RUNNING without its batch script; the node agents must declare the batch host dead
# themselves (heartbeat and slurmd probe), submit the job again without it (2 nodes: the spare
# takes its place) and cancel the old job; the new job resumes from the newest checkpoint.
# FTRAIN_TEST_DEFAULT_TIMEOUTS=1: the same under Slurm's default SlurmdTimeout=300 /
# MessageTimeout=10: the new job must train while Slurm still has not noticed the death.
# Without spares then (2 nodes of a cluster with a free one), ftrain's detection on: the agents
# submit the job again at the same size, without the dead node, once.
# FTRAIN_TEST_BATCH_HOST_PAUSE=1 (with a spare, under the default timeouts): the batch host
# hangs instead (local-cluster pause-node: SIGSTOP of its slurmd and of everything it runs; its
# kernel still completes TCP handshakes). The agents must declare it "hung" after
# FTRAIN_HUNG_AFTER_S (6 s here) of silence with no task starting on it, and submit the job
# again; once the new job has committed a checkpoint the host is resumed, its train.sh, ranks
# and daemon wake up in the middle of the old job's work, and generation fencing must keep
# them out of the new job's checkpoints.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_batch_host_failure_test"
SPARES="${FTRAIN_TEST_SPARE_NODES:-0}"
DEFAULT_TIMEOUTS="${FTRAIN_TEST_DEFAULT_TIMEOUTS:-0}"
((DEFAULT_TIMEOUTS)) && SLURM_TEST_NAME="train_batch_host_failure_default_timeouts_test"
((DEFAULT_TIMEOUTS && !SPARES)) && SLURM_TEST_NAME="train_batch_host_failure_no_spare_default_timeouts_test"
PAUSE="${FTRAIN_TEST_BATCH_HOST_PAUSE:-0}"
((PAUSE)) && SLURM_TEST_NAME="train_batch_host_pause_test"
SEED="${FTRAIN_TEST_SEED:-$(( $(date +%s) % 100000 ))}"
FAIL_AT_STEP=$(( 8 + SEED % 40 ))   # 8..47 of 60: before, between and after checkpoints

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
if ((PAUSE)); then
  ((SPARES && DEFAULT_TIMEOUTS)) || fail "FTRAIN_TEST_BATCH_HOST_PAUSE=1 needs FTRAIN_TEST_SPARE_NODES=1 and FTRAIN_TEST_DEFAULT_TIMEOUTS=1"
  export FTRAIN_HUNG_AFTER_S=6
fi
submit_args=()
if ((SPARES > 0)); then
  (($(cluster_nodes | wc -l) >= 2 + SPARES)) || skip "needs a cluster of $((2 + SPARES)) nodes"
  export FTRAIN_SPARE_NODES="${SPARES}"
  submit_args=(--nodes=$((2 + SPARES)) --no-kill)
elif ((DEFAULT_TIMEOUTS)); then
  (($(cluster_nodes | wc -l) >= 3)) || skip "needs a cluster of 3 nodes (one free for the new job)"
else
  export FTRAIN_DETECT=0  # Slurm's requeue (under short timeouts ftrain's agents would race it)
fi

((DEFAULT_TIMEOUTS)) && e2e_use_timeouts 300 10

log "seed ${SEED}: $( ((PAUSE)) && echo hang || echo crash) the batch host at step ~${FAIL_AT_STEP} (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit batch "${submit_args[@]}")"
wait_for_file_lines "${WORK_DIR}/batch/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(job_field "${JOB_ID}" BatchHost)"
[[ -n "${node}" ]] || fail "job ${JOB_ID} has no batch host"
old_n="$(job_nodes "${JOB_ID}" | wc -l)"
e2e_freeze_ranks batch  # the failure lands before the run ends however fast it trains
if ((PAUSE)); then
  log "pause-node ${node} (the batch host: train.sh hangs with it)"
  t_fail="$(now_s)"
  e2e_pause_node "${node}"
  e2e_thaw_ranks batch
  "${LOCAL_CLUSTER}" pause-node "${node}" >/dev/null  # its own ranks again, thawed just now
else
  log "fail-node ${node} (the batch host: train.sh dies with it)"
  t_fail="$(now_s)"
  e2e_fail_node "${node}"
  e2e_thaw_ranks batch
fi
if ((SPARES == 0 && !DEFAULT_TIMEOUTS)); then
  wait_for_restarts "${JOB_ID}" 1 120
  e2e_revive_node
  e2e_wait_done "${JOB_ID}" batch
  grep -q 'restart count 1' "${WORK_DIR}"/batch-*.out || fail "the requeued start did not log SLURM_RESTART_COUNT=1"
  e2e_expect_restore_from_disk batch "${node}" 1  # none before the step-5 checkpoint completed
  e2e_expect_identical batch
  log "PASS (no spare): the batch host crashed at step ${FAIL_AT_STEP}; requeued, relaunched and bit-identical"
  PASSED=1
  exit 0
fi

old_job="${JOB_ID}"
# (into a variable first: a failed wait leaves JOB_ID at the old job, which the cleanup cancels)
new_job="$(e2e_wait_resubmitted batch "${old_job}" 60)"
JOB_ID="${new_job}"
t_resubmit="$(now_s)"
[[ "${JOB_ID}" =~ ^[0-9]+$ ]] || fail "no new job id in the resubmitted record"
# Cancelled: COMPLETING until the dead node is DOWN (its live nodes are freed at once).
wait_for_job_state "${old_job}" 'CANCELLED|COMPLETING' 60
# A hung host keeps the old job's other nodes a while: their slurmstepds try to tell its frozen
# srun that the tasks ended (6 tries of MessageTimeout each) before they release the nodes.
wait_for_job_state "${JOB_ID}" RUNNING $((PAUSE ? 150 : 60))
t_running="$(now_s)"
# Slurm has not given up on the dead node yet (under its defaults: for 300 s), and the new job
# does without it.
state="$(node_state "${node}")"
((DEFAULT_TIMEOUTS)) && [[ "${state}" == down* ]] &&
  fail "Slurm marked ${node} ${state} already: the test proves nothing about its timeouts"
job_nodes "${JOB_ID}" | grep -qx "${node}" && fail "the new job ${JOB_ID} runs on the dead node ${node}"
# With a spare the new job does without it (one node fewer); without, it keeps its size.
[[ "$(job_nodes "${JOB_ID}" | wc -l)" == "$((old_n - SPARES))" ]] ||
  fail "the new job ${JOB_ID} runs on $(job_nodes "${JOB_ID}" | paste -sd' '), not on $((old_n - SPARES)) nodes (old job: ${old_n}, ${SPARES} spare(s))"
log "new job ${JOB_ID} running on $(job_nodes "${JOB_ID}" | paste -sd' ') while Slurm sees ${node} ${state}"
if ((PAUSE)); then
  # The new job commits a checkpoint of its own, then the old one wakes up.
  wait_for 120 "a checkpoint of the new job" e2e_new_generation_committed batch
  e2e_resume_node
  log "resumed ${node}: the old job's train.sh, ranks and daemon wake up"
else
  wait_for_file_lines "${WORK_DIR}/batch/metrics.jsonl" "${E2E_STEPS}" 120
  e2e_revive_node
fi
e2e_wait_done "${JOB_ID}" batch
t_done="$(now_s)"
wait_for_job_state "${old_job}" CANCELLED 60
# Once the node is DOWN, Slurm (without --no-kill: it ends the job) must not requeue it again.
[[ "$(e2e_restarts "${old_job}")" == 0 ]] || fail "Slurm requeued the cancelled job ${old_job} too"
log "batch host $( ((PAUSE)) && echo hang || echo death) -> resubmitted $(elapsed_s "${t_fail}" "${t_resubmit}") s, -> new job running $(elapsed_s "${t_fail}" "${t_running}") s, -> finished $(elapsed_s "${t_fail}" "${t_done}") s"

run="${WORK_DIR}/batch"
n_resub="$(grep -c '"event":"resubmitted"' "${run}/restarts.jsonl")"
[[ "${n_resub}" == 1 ]] || fail "${n_resub} resubmissions, not one: $(cat "${run}/restarts.jsonl")"
rec="$(grep '"event":"step_failed"' "${run}/restarts.jsonl" | grep '"batch_host":true')" ||
  fail "no record of the batch host failure: $(cat "${run}/restarts.jsonl")"
verdict=dead
((PAUSE)) && verdict=hung
[[ "${rec}" == *"\"job\":\"${old_job}\","* && "${rec}" == *"\"node\":\"${node}\""* &&
  "${rec}" == *"\"detected_by\":\"ftrain\",\"verdict\":\"${verdict}\""* && "${rec}" == *'"evidence":"heartbeat silent'* ]] ||
  fail "the batch host was not declared ${verdict} by ftrain's detection: ${rec}"
grep -q "\"event\":\"requeued\",\"cause\":\"node_failure\",\"resubmitted_from\":\"${old_job}\"" "${run}/restarts.jsonl" ||
  fail "the new job's start was not recorded as a resumption of ${old_job}"
grep -q "this job continues as job ${JOB_ID}" "${WORK_DIR}/batch-${old_job}.out" ||
  fail "the old job's output does not name the new job ${JOB_ID}"
grep -q "submitted again" "${WORK_DIR}/batch-${JOB_ID}.out" || fail "the new job did not log that it is a resubmission"
report="$("${E2E_BIN}/ftrain" report "${run}")" || fail "ftrain report ${run} failed"
for want in "resubmitted (job ${old_job})" "requeued (job ${JOB_ID})" 'ftrain: heartbeats and a probe'; do
  grep -qF "${want}" <<<"${report}" || fail "ftrain report does not show '${want}': ${report}"
done
if ((PAUSE)); then
  [[ "${rec}" == *'"slurmd":"open"'* ]] || fail "the paused host's slurmd port was not found open: ${rec}"
  resume_step="$(e2e_resume_step_after batch requeued)"
  [[ -n "${resume_step}" ]] || resume_step=0  # no checkpoint was complete: it started afresh
  e2e_expect_generation_after batch "${resume_step}" "$(e2e_new_generation batch)"
else
  e2e_expect_restore_from_disk batch "${node}" 1  # none before the step-5 checkpoint completed
fi
e2e_expect_identical batch
log "PASS (${SPARES} spare(s)$( ((DEFAULT_TIMEOUTS)) && echo ", Slurm's default timeouts")): the batch host $( ((PAUSE)) && echo hung || echo crashed) at step ${FAIL_AT_STEP}; job ${old_job} submitted again as ${JOB_ID} and cancelled; bit-identical"
PASSED=1
