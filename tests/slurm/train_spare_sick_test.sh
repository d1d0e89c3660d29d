#!/usr/bin/env bash
# train_spare_sick_test.sh - the idle spare of `sbatch --nodes=3 --no-kill` (FTRAIN_SPARE_NODES=1,
# the last node) goes wrong while the two training nodes are fine:
#   1. the spare is sick: it answers Slurm, but cannot run `true` (bind-mounted /bin/false in
#      its mount namespace), and a rank is SIGKILLed at that moment. A rank failure on healthy
#      training nodes is an in-job restart; it used to wait FTRAIN_HEALTH_WAIT_S for a training
#      node to leave (none does) and requeue the whole job;
#   2. the spare dies (fail-node) while the ranks train: train.sh reports it (spare_lost) when
#      Slurm takes it out of the job, not at the next failure, and the replication ring
#      re-forms: the training node before it (ranks 2,3) replicates to the first node.
# The job never leaves RUNNING and ends bit-identical to the uninterrupted reference.
# Needs a cluster of >= 3 nodes (FTRAIN_TEST_NODES). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_sick_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
SICK_AT_STEP=10
DEAD_AT_STEP=25

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"
spare="${nodes[2]}"
SICK=""
cleanup_sick() {
  if [[ -n "${SICK}" ]]; then "${LOCAL_CLUSTER}" node-exec "${SICK}" umount /usr/bin/true 2>/dev/null || true; fi
  SICK=""
}
on_exit() {
  local rc=$?
  cleanup_sick
  (exit "${rc}") || e2e_cleanup  # a failure: e2e_cleanup exits with the status it finds
  e2e_cleanup
}
trap on_exit EXIT

# A short health wait, so that the old behaviour (wait, then requeue) shows within the test.
export FTRAIN_SPARE_NODES=1 FTRAIN_HEALTH_WAIT_S=20 FTRAIN_HEALTH_TIMEOUT_S=15
export FTRAIN_RESTART_BACKOFF_S=1 FTRAIN_SPARE_CHECK_S=2
JOB_ID="$(e2e_submit sick --nodes=3 --no-kill)"
e2e_watch_states "${JOB_ID}" "${WORK_DIR}/states"
wait_for_file_lines "${WORK_DIR}/sick/metrics.jsonl" "${SICK_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_nodes "${JOB_ID}" | paste -sd' ')" == "${nodes[*]:0:3}" ]] ||
  fail "job ${JOB_ID} is not on ${nodes[*]:0:3}"

log "1. spare ${spare} sick (cannot run true), and a rank SIGKILLed"
e2e_freeze_ranks sick  # (the tiny model would otherwise train on and finish meanwhile)
"${LOCAL_CLUSTER}" node-exec "${spare}" mount --bind /bin/false /usr/bin/true
SICK="${spare}"
if "${LOCAL_CLUSTER}" node-exec "${spare}" /usr/bin/true; then fail "could not make ${spare} sick"; fi
e2e_rank_pids sick | head -n 1 | xargs -r kill -KILL
e2e_thaw_ranks sick
wait_for 120 "the in-job restart after the rank failure" \
  grep -q '"event":"restarted","cause":"rank_failure"' "${WORK_DIR}/sick/restarts.jsonl"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the rank failure requeued the job"
grep -q 'step_failed' "${WORK_DIR}/sick/restarts.jsonl" &&
  fail "the rank failure was taken for a node failure: $(grep step_failed "${WORK_DIR}/sick/restarts.jsonl")"
cleanup_sick

wait_for_file_lines "${WORK_DIR}/sick/metrics.jsonl" "${DEAD_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
log "2. spare ${spare} dies while the ranks train (frozen until Slurm took it out of the job)"
e2e_freeze_ranks sick
e2e_fail_node "${spare}"
wait_for 90 "the spare_lost record of ${spare}, with no other failure" \
  grep -q "\"event\":\"spare_lost\",\"cause\":\"node_failure\",\"node\":\"${spare}\"" \
  "${WORK_DIR}/sick/restarts.jsonl"
steps_at_loss="$(wc -l <"${WORK_DIR}/sick/metrics.jsonl")"
grep -q "spare node ${spare} is gone (while the ranks train)" "${WORK_DIR}"/sick-*.out ||
  fail "train.sh did not notice the spare's loss while the ranks trained"
# The ring without the spare: ${nodes[1]} (ranks 2,3) replicated to the spare; now to ${nodes[0]}.
e2e_thaw_ranks sick
e2e_freeze_settled sick "${nodes[0]}" "2 3"
e2e_thaw_ranks sick
e2e_wait_done "${JOB_ID}" sick
wait
e2e_revive_node

[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued"
[[ "$(grep -v PENDING "${WORK_DIR}/states" | uniq | paste -sd' ')" == "RUNNING COMPLETED" ]] ||
  fail "job states: $(uniq "${WORK_DIR}/states" | paste -sd' ')"
(($(grep -c '"event":"restarted"' "${WORK_DIR}/sick/restarts.jsonl") == 1)) ||
  fail "more than the one in-job restart: $(cat "${WORK_DIR}/sick/restarts.jsonl")"
(($(grep -c 'launching ' "${WORK_DIR}"/sick-*.out) == 2)) ||
  fail "the spare's loss relaunched the ranks"
((steps_at_loss < 60)) || fail "the spare's loss was reported only after the training ended"
e2e_expect_identical sick
log "PASS: a rank failure with a sick spare restarted in the job; the dead spare was reported at step ${steps_at_loss} and left the ring; bit-identical"
PASSED=1
