#!/usr/bin/env bash
# train_elastic_shrink_test.sh - a run that loses a node with no spare shrinks onto the
# survivors (issue 47): `sbatch --nodes=3 --no-kill slurm/train.sh` with dist.reduce = exact
# (FTRAIN_ELASTIC=auto turns elasticity on) trains on 3 nodes x 2 ranks; a training node that
# is not the batch host crashes (fail-node) at a random step; `ftrain job` drops its ranks and
# relaunches on the 2 survivors (4 ranks) in the allocation, from the newest checkpoint
# resharded. Then the node comes back (revive-node): the job gains it (salloc
# --dependency=expand, FTRAIN_ELASTIC_GROW_S=1), the ranks checkpoint and stop, and the run
# grows back to 6 ranks on 3 nodes. The job never leaves RUNNING, restarts.jsonl records the
# shrink and the growth, and the run ends bit-identical to the uninterrupted reference on 3
# nodes (6 ranks), every loss equal: with the exact reduction the bits do not depend on the
# number of ranks, so 6 ranks, then 4, then 6 equal 6 all along.
# FTRAIN_TEST_SEED reproduces a run (printed). Needs a cluster of >= 3 nodes.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_elastic_shrink_test"
E2E_STEPS=90
E2E_TRAIN_ARGS="--train.steps=${E2E_STEPS} --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard --dist.reduce=exact --train.global_batch=48"
SEED="${FTRAIN_TEST_SEED:-$(($(date +%s) % 100000))}"
FAIL_AT_STEP=$((8 + SEED % 20))  # 8..27 of 90: before, between and after checkpoints; the
# rest leaves time for the node to come back (Slurm marks it DOWN first) and the run to grow
export FTRAIN_ELASTIC_GROW_S=1 E2E_REF_NODES=3

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"

log "seed ${SEED}: crash training node ${nodes[2]} at step ~${FAIL_AT_STEP}, no spare (FTRAIN_TEST_SEED=${SEED} reproduces)"
others=("${nodes[@]:3}")  # the job may grow only with the node it lost
JOB_ID="$(e2e_submit shrink --nodes=3 --no-kill ${others[0]:+--exclude="$(IFS=,; echo "${others[*]}")"})"
e2e_watch_states "${JOB_ID}" "${WORK_DIR}/states"
wait_for_file_lines "${WORK_DIR}/shrink/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_field "${JOB_ID}" BatchHost)" == "${nodes[0]}" ]] ||
  fail "the batch host is $(job_field "${JOB_ID}" BatchHost), not ${nodes[0]}"
t_fail="$(now_s)"
e2e_fail_node "${nodes[2]}"
wait_for 120 "the shrink record" grep -q '"event":"restarted","cause":"shrink"' \
  "${WORK_DIR}/shrink/restarts.jsonl"
t_relaunch="$(now_s)"
e2e_revive_node
t_back="$(now_s)"
wait_for 120 "the grow record" grep -q '"event":"restarted","cause":"grow"' \
  "${WORK_DIR}/shrink/restarts.jsonl"
t_grown="$(now_s)"
e2e_wait_done "${JOB_ID}" shrink
wait
log "fail-node -> relaunch on the survivors $(elapsed_s "${t_fail}" "${t_relaunch}") s;" \
  "node back -> relaunch on 3 nodes $(elapsed_s "${t_back}" "${t_grown}") s"

[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued ($(e2e_restarts "${JOB_ID}") restarts)"
bad="$(grep -Ev '^(PENDING|RUNNING|COMPLETING|COMPLETED)$' "${WORK_DIR}/states" | sort -u | paste -sd' ' || true)"
[[ -z "${bad}" ]] || fail "the job left RUNNING: states seen: ${bad}"
rec="$(grep '"event":"restarted","cause":"shrink"' "${WORK_DIR}/shrink/restarts.jsonl")"
[[ "${rec}" == *"\"node\":\"${nodes[2]}\",\"nodes\":2,\"world\":4,\"shrink\":1"* ]] ||
  fail "the shrink record does not name the node and the new world: ${rec}"
out="$(cat "${WORK_DIR}"/shrink-*.out)"
[[ "${out}" == *"6 ranks: ${nodes[0]} ${nodes[0]} ${nodes[1]} ${nodes[1]} ${nodes[2]} ${nodes[2]}"* ]] ||
  fail "the first launch was not 6 ranks on 3 nodes"
[[ "${out}" == *"shrinking to 2 node(s), 4 ranks"* && "${out}" == *"4 ranks: ${nodes[0]} ${nodes[0]} ${nodes[1]} ${nodes[1]}"* ]] ||
  fail "the relaunch was not 4 ranks on the survivors"
rec="$(grep '"event":"restarted","cause":"grow"' "${WORK_DIR}/shrink/restarts.jsonl")"
[[ "${rec}" == *"\"node\":\"${nodes[2]}\",\"nodes\":3,\"world\":6,\"grow\":1"* ]] ||
  fail "the grow record does not name the node and the new world: ${rec}"
last_launch="$(grep -o 'train on [0-9]* ranks: .*' <<<"${out}" | tail -1)"
[[ "${last_launch}" == "train on 6 ranks: ${nodes[0]} ${nodes[0]} ${nodes[1]} ${nodes[1]} ${nodes[2]} ${nodes[2]}" ]] ||
  fail "the last launch was not 6 ranks on 3 nodes: ${last_launch}"
e2e_expect_identical shrink
log "PASS: ${nodes[2]} crashed at step ${FAIL_AT_STEP}; the run shrank to 4 ranks and grew back to 6 when it returned, never requeued, bit-identical to 6 ranks all along"
PASSED=1
