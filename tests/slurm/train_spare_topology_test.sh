#!/usr/bin/env bash
# train_spare_topology_test.sh - the replication ring and the batch-host watchers follow the
# replacements. `sbatch --nodes=4 --no-kill` with two spares, the batch host among them
# (FTRAIN_SPARE_NODELIST=n1,n4): ranks 0,1 on n2, ranks 2,3 on n3; the ring is
# n1 n2 n3 n4, each node's buddy the far side of it (hole 12: n1 <-> n3, n2 <-> n4), and the
# batch host n1 is watched by n2 and n3.
#   1. n3 dies: spare n1 takes ranks 2,3 and restores them from its own replica store (n1 is
#      n3's buddy). The ring re-forms as n1 n2 n4 (N = 3: the buddy is the next node): n2 now
#      replicates to n4, n4 to n1 (a node whose buddy died used to keep sending to it, so its
#      ranks were no longer replicated anywhere);
#   2. n2 dies: spare n4 takes ranks 0,1 and must restore them from its own replica store;
#   3. the batch host n1 dies: both watchers (n2, n3) are gone; n4, the watcher re-chosen
#      among the live nodes, must submit the job again (it used to stay RUNNING with nothing
#      driving it until its time limit) and cancel it.
# The new job resumes from disk and ends bit-identical to the uninterrupted reference.
# Needs a cluster of >= 4 nodes (FTRAIN_TEST_NODES=4). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_topology_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
FAIL1_AT_STEP=10
FAIL2_AT_STEP=25
FAIL3_AT_STEP=40

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 4)) || skip "needs a cluster of 4 nodes (FTRAIN_TEST_NODES=4), have ${#nodes[@]}"
n1="${nodes[0]}" n2="${nodes[1]}" n3="${nodes[2]}" n4="${nodes[3]}"
RUN="${WORK_DIR}/topo"

export FTRAIN_SPARE_NODES=2 FTRAIN_SPARE_NODELIST="${n1},${n4}"
JOB_ID="$(e2e_submit topo --nodes=4 --no-kill)"
wait_for_file_lines "${RUN}/metrics.jsonl" "${FAIL1_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_field "${JOB_ID}" BatchHost)" == "${n1}" ]] ||
  fail "the batch host is $(job_field "${JOB_ID}" BatchHost), not ${n1}"

# Waits for the N-th replacement record and checks that it moved DEAD's ranks to SPARE.
replaced() {  # replaced N DEAD SPARE
  wait_for 120 "replacement $1 (${2} -> ${3})" bash -c \
    "(( \$(grep -c '\"event\":\"restarted\",\"cause\":\"node_failure\"' '${RUN}/restarts.jsonl') >= $1 ))"
  grep -q "\"event\":\"restarted\",\"cause\":\"node_failure\",\"node\":\"$2\",\"spare\":\"$3\"" \
    "${RUN}/restarts.jsonl" || fail "replacement $1 is not $2 -> $3: $(cat "${RUN}/restarts.jsonl")"
}

log "1. ${n3} (ranks 2,3) dies once ${n1}, its buddy, holds their replicas"
e2e_freeze_settled topo "${n1}" "2 3"
e2e_fail_node "${n3}"
e2e_thaw_ranks topo
replaced 1 "${n3}" "${n1}"
# Back in the cluster, not in the job: the requeue at the end needs it. In the background:
# revive-node waits for Slurm to mark the node DOWN, and the job (replaced within seconds by
# ftrain's own detection) must not run to its end meanwhile.
revive_bg() { "${LOCAL_CLUSTER}" revive-node "$1" >"${WORK_DIR}/revive-$1.log" 2>&1; }
revive_bg "${n3}" &
revive3=$!
FAILED_NODE=""

wait_for_file_lines "${RUN}/metrics.jsonl" "${FAIL2_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
log "2. ${n2} (ranks 0,1; ${n3}'s predecessor) dies once ${n4} holds their replicas"
e2e_freeze_settled topo "${n4}" "0 1"
step2="$("${E2E_BIN}/ckptctl" latest "${RUN}/checkpoints")"
step2="$((10#${step2##*step-}))"
e2e_fail_node "${n2}"
e2e_thaw_ranks topo
replaced 2 "${n2}" "${n4}"
revive_bg "${n2}" &
revive2=$!
FAILED_NODE=""
wait_for 120 "the resume after replacement 2" bash -c \
  "sed -n '/\"replacement\":2,/,\$p' '${RUN}/restarts.jsonl' | grep -q '\"event\":\"resumed\"'"
resumed="$(sed -n '/"replacement":2,/,$p' "${RUN}/restarts.jsonl" | grep '"event":"resumed"' | head -n 1)"
[[ "${resumed}" == *"\"step\":${step2},"* && "${resumed}" == *'"ranks_from_memory":4,'* &&
  "${resumed}" == *'"ranks_from_peer":2,'* ]] ||
  fail "after the second replacement ranks 0,1 did not restore from ${n4}'s replicas: ${resumed}"

wait_for_file_lines "${RUN}/metrics.jsonl" "${FAIL3_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
log "3. the batch host ${n1} dies; its first watchers ${n2}, ${n3} are gone"
e2e_fail_node "${n1}"
wait "${revive3}" || fail "revive-node ${n3}: $(cat "${WORK_DIR}/revive-${n3}.log")"
wait "${revive2}" || fail "revive-node ${n2}: $(cat "${WORK_DIR}/revive-${n2}.log")"
old_job="${JOB_ID}"
# (into a variable first: a failed wait leaves JOB_ID at the old job, which the cleanup cancels)
new_job="$(e2e_wait_resubmitted topo "${old_job}" 120)"
JOB_ID="${new_job}"
e2e_revive_node
e2e_wait_done "${JOB_ID}" topo
grep -q "\"event\":\"step_failed\",\"cause\":\"node_failure\",\"node\":\"${n1}\",\"batch_host\":true,\"watcher\":\"${n4}\"" \
  "${RUN}/restarts.jsonl" || fail "no record of ${n4} resubmitting for the batch host: $(cat "${RUN}/restarts.jsonl")"
e2e_expect_identical topo
log "PASS: two replacements re-formed the ring (${n2}'s ranks restored from ${n4}'s memory) and the watchers (${n4} submitted job ${old_job} again as ${JOB_ID} when the batch host died); bit-identical"
PASSED=1
