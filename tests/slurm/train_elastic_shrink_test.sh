#!/usr/bin/env bash
# train_elastic_shrink_test.sh - a run that loses a node with no spare shrinks onto the
# survivors (issue 47): `sbatch --nodes=3 --no-kill slurm/train.sh` with dist.reduce = exact
# (FTRAIN_ELASTIC=auto turns elasticity on) trains on 3 nodes x 2 ranks; a training node that
# is not the batch host crashes (fail-node) at a random step; `ftrain job` drops its ranks and
# relaunches on the 2 survivors (4 ranks) in the allocation, from the newest checkpoint
# resharded. The job never leaves RUNNING, restarts.jsonl records the shrink, and the run ends
# bit-identical to the uninterrupted reference, which trained on 2 nodes (4 ranks): with the
# exact reduction the bits do not depend on the number of ranks, so 6 ranks then 4 equal 4
# all along. FTRAIN_TEST_SEED reproduces a run (printed). Needs a cluster of >= 3 nodes.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_elastic_shrink_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard --dist.reduce=exact --train.global_batch=48"
SEED="${FTRAIN_TEST_SEED:-$(($(date +%s) % 100000))}"
FAIL_AT_STEP=$((8 + SEED % 40))  # 8..47 of 60: before, between and after checkpoints

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"

log "seed ${SEED}: crash training node ${nodes[2]} at step ~${FAIL_AT_STEP}, no spare (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit shrink --nodes=3 --no-kill)"
e2e_watch_states "${JOB_ID}" "${WORK_DIR}/states"
wait_for_file_lines "${WORK_DIR}/shrink/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(job_field "${JOB_ID}" BatchHost)" == "${nodes[0]}" ]] ||
  fail "the batch host is $(job_field "${JOB_ID}" BatchHost), not ${nodes[0]}"
t_fail="$(now_s)"
e2e_fail_node "${nodes[2]}"
wait_for 120 "the shrink record" grep -q '"event":"restarted","cause":"shrink"' \
  "${WORK_DIR}/shrink/restarts.jsonl"
t_relaunch="$(now_s)"
e2e_wait_done "${JOB_ID}" shrink
wait
log "fail-node -> relaunch on the survivors $(elapsed_s "${t_fail}" "${t_relaunch}") s"

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
e2e_expect_identical shrink
log "PASS: ${nodes[2]} crashed at step ${FAIL_AT_STEP}; the run shrank to 4 ranks, never requeued, bit-identical to 4 ranks all along"
PASSED=1
