#!/usr/bin/env bash
# train_spare_node_test.sh - a hot spare replaces a failed training node inside the allocation:
# `sbatch --nodes=3 --no-kill slurm/train.sh` with FTRAIN_SPARE_NODES=1 trains on 2 nodes x 2
# ranks; a training node crashes (fail-node) at a random step; train.sh relaunches the step on
# the survivor plus the spare with the same ranks on the survivor and the dead node's ranks on
# the spare. The job never leaves RUNNING (no requeue), restarts.jsonl records the replacement,
# and the run ends bit-identical to the uninterrupted reference.
# The spare is the batch host (node1) and the crash hits the last training node, so the spare
# sorts before the survivor: Slurm numbers the relaunched step's nodes the other way round and
# the trainer must number them by lowest rank. With spares the daemons replicate their
# snapshots to their buddy, the far side of the ring (three nodes: the next one, node1 -> node2
# -> node3 -> node1), so the spare holds
# the dead node's snapshots: the test freezes the ranks at the crash step until the newest
# checkpoint is committed and replicated (else the resume would rightly read those ranks from
# disk), and asserts that ranks 2,3 restored from peer memory, ranks 0,1 from their own
# daemon's memory. FTRAIN_TEST_NO_REPLICA=1: the spare has no room for replicas (a tiny
# FTRAIN_REPLICA_MEMORY_GB), so it holds nothing when the node dies: ranks 2,3 read from disk,
# still bit-identical. FTRAIN_TEST_SEED reproduces a run (printed).
# FTRAIN_TEST_DEFAULT_TIMEOUTS=1: the cluster runs with Slurm's default SlurmdTimeout=300 and
# MessageTimeout=10 for the test (put back at exit): Slurm would notice the crash after 5 min,
# so the replacement must come from ftrain's own detection (heartbeats + a refused slurmd,
# slurm/detect.sh), recorded with its evidence and shown by `ftrain report`.
# Needs a cluster of >= 3 nodes (FTRAIN_TEST_NODES). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_node_test"
# full_shard: every rank owns its own slice of the state, so a rank's snapshot is its whole
# state (with hybrid_shard the second node's ranks checkpoint only their per-rank state and
# load the tensors from the first node's shards, so there is little to restore from a peer).
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
SEED="${FTRAIN_TEST_SEED:-$(($(date +%s) % 100000))}"
NO_REPLICA="${FTRAIN_TEST_NO_REPLICA:-0}"
DEFAULT_TIMEOUTS="${FTRAIN_TEST_DEFAULT_TIMEOUTS:-0}"
((DEFAULT_TIMEOUTS)) && SLURM_TEST_NAME="train_spare_node_default_timeouts_test"
FAIL_AT_STEP=$((8 + SEED % 40))  # 8..47 of 60: before, between and after checkpoints

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"
((DEFAULT_TIMEOUTS)) && e2e_use_timeouts 300 10

# A 3-node job on 3 idle nodes: the batch host is the first one.
export FTRAIN_SPARE_NODES=1 FTRAIN_SPARE_NODELIST="${nodes[0]}"
if ((NO_REPLICA)); then
  SLURM_TEST_NAME="train_spare_node_no_replica_test"
  export FTRAIN_REPLICA_MEMORY_GB=0.000001
fi
log "seed ${SEED}: crash training node ${nodes[2]} at step ~${FAIL_AT_STEP}, spare ${nodes[0]} (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit spare --nodes=3 --no-kill)"
# Every state the job is seen in, until it ends: must be RUNNING, then COMPLETED.
e2e_watch_states "${JOB_ID}" "${WORK_DIR}/states"
wait_for_file_lines "${WORK_DIR}/spare/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_field "${JOB_ID}" BatchHost)" == "${nodes[0]}" ]] ||
  fail "the batch host is $(job_field "${JOB_ID}" BatchHost), not ${nodes[0]}"
# Frozen when no snapshot is in flight anywhere and the spare holds replicas of ranks 2 and 3
# of the newest committed checkpoint.
replicated_ranks="2 3"
((NO_REPLICA)) && replicated_ranks=""
e2e_freeze_settled spare "${nodes[0]}" "${replicated_ranks}"
resume_step="$("${E2E_BIN}/ckptctl" latest "${WORK_DIR}/spare/checkpoints")"
resume_step="$((10#${resume_step##*step-}))"
log "frozen with step ${resume_step} committed$( ((NO_REPLICA)) || echo " and replicated to ${nodes[0]}")"
t_fail="$(now_s)"
e2e_fail_node "${nodes[2]}"
e2e_thaw_ranks spare
wait_for 120 "the replacement record" grep -q '"event":"restarted","cause":"node_failure"' \
  "${WORK_DIR}/spare/restarts.jsonl"
t_relaunch="$(now_s)"
e2e_wait_done "${JOB_ID}" spare
t_done="$(now_s)"
wait
log "fail-node -> relaunch on the spare $(elapsed_s "${t_fail}" "${t_relaunch}") s; -> finished $(elapsed_s "${t_fail}" "${t_done}") s"

[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued ($(e2e_restarts "${JOB_ID}") restarts)"
# (COMPLETING: the moment between the batch script's end and the nodes' epilogs, seen by a poll)
bad="$(grep -Ev '^(PENDING|RUNNING|COMPLETING|COMPLETED)$' "${WORK_DIR}/states" | sort -u | paste -sd' ' || true)"
[[ -z "${bad}" ]] || fail "the job left RUNNING: states seen: ${bad}"
[[ "$(grep -Ev '^(PENDING|COMPLETING)$' "${WORK_DIR}/states" | uniq | paste -sd' ')" == "RUNNING COMPLETED" ]] ||
  fail "job states: $(uniq "${WORK_DIR}/states" | paste -sd' ')"
rec="$(grep '"event":"restarted","cause":"node_failure"' "${WORK_DIR}/spare/restarts.jsonl")"
[[ "${rec}" == *"\"node\":\"${nodes[2]}\",\"spare\":\"${nodes[0]}\""* && "${rec}" == *'"detected":'* ]] ||
  fail "the replacement record does not name the nodes: ${rec}"
grep -q "\"event\":\"step_failed\",\"cause\":\"node_failure\",\"node\":\"${nodes[2]}\"" \
  "${WORK_DIR}/spare/restarts.jsonl" || fail "no step_failed record: $(cat "${WORK_DIR}/spare/restarts.jsonl")"
out="$(cat "${WORK_DIR}"/spare-*.out)"
[[ "${out}" == *"4 ranks: ${nodes[1]} ${nodes[1]} ${nodes[0]} ${nodes[0]}"* ]] ||
  fail "the relaunch did not put ranks 2,3 on the spare"
[[ "${out}" == *"launcher node id 1 is node 0 by lowest rank"* ]] ||
  fail "the trainer did not renumber the nodes of the relaunched step"
resumed="$(sed -n '/"event":"restarted","cause":"node_failure"/,$p' "${WORK_DIR}/spare/restarts.jsonl" |
  grep '"event":"resumed"' | head -n 1)"
if ((NO_REPLICA)); then
  [[ "${resumed}" == *"\"step\":${resume_step},"* && "${resumed}" == *'"ranks_from_memory":2,'* &&
    "${resumed}" == *'"ranks_from_peer":0,'* ]] ||
    fail "with no replica anywhere ranks 2,3 must read from disk, 0,1 from memory: ${resumed}"
  grep -q "does not fit" "${WORK_DIR}/spare/logs/ckptd-${nodes[0]}.log" ||
    fail "the spare's daemon did not say that the replicas do not fit"
else
  [[ "${resumed}" == *"\"step\":${resume_step},"* && "${resumed}" == *'"ranks_from_memory":4,'* &&
    "${resumed}" == *'"ranks_from_peer":2,'* ]] ||
    fail "the replacement did not restore ranks 2,3 from peer memory and 0,1 from local memory: ${resumed}"
  grep -Eq "rank [23] fetched step ${resume_step} from peer " <<<"${out}" ||
    fail "no rank on the spare logged its fetch from a peer"
  # (read whole first: `report | grep -q` under pipefail fails when grep stops reading early)
  grep -q "fetched from a peer's memory" <<<"$("${E2E_BIN}/ftrain" report "${WORK_DIR}/spare")" ||
    fail "ftrain report does not show the restore from peer memory"
fi
if ((DEFAULT_TIMEOUTS)); then
  rec="$(grep '"event":"step_failed","cause":"node_failure"' "${WORK_DIR}/spare/restarts.jsonl")"
  [[ "${rec}" == *'"detected_by":"ftrain","verdict":"dead"'* && "${rec}" == *'"slurmd":"refused"'* ]] ||
    fail "the failure was not declared by ftrain's own detection: ${rec}"
  grep -q "released ${nodes[2]} from job ${JOB_ID}" "${WORK_DIR}"/spare-*.out ||
    fail "train.sh did not release ${nodes[2]} from the job"
  grep -q "evidence  *heartbeat silent" <<<"$("${E2E_BIN}/ftrain" report "${WORK_DIR}/spare")" ||
    fail "ftrain report does not show the detection's evidence"
fi
e2e_expect_identical spare
from="peer memory"
((NO_REPLICA)) && from="disk (no replica)"
log "PASS: ${nodes[2]} crashed at step ${FAIL_AT_STEP}; its ranks ran on spare ${nodes[0]} from ${from}, never requeued, bit-identical"
PASSED=1
