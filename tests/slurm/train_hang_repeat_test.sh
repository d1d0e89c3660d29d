#!/usr/bin/env bash
# train_hang_repeat_test.sh - a hang that repeats on one node, on the local Slurm cluster:
# `sbatch --nodes=3 --no-kill` with one spare (FTRAIN_SPARE_NODES=1, the first node). Rank 3 (on
# the last node) stalls at step 23 (FTRAIN_FAULT): the hang guard names it, every rank exits
# 78, train.sh restarts in the allocation from step 20; rank 3 stalls again at step 28 on the
# same node: RUN/hangs.jsonl names that host twice in a row, so `ftrain job` keeps the node out
# by quarantine (RUN/quarantine.jsonl): the spare takes ranks 2 and 3. The job never leaves RUNNING and ends
# bit-identical to the uninterrupted reference. Needs a cluster of >= 3 nodes
# (FTRAIN_TEST_NODES). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_hang_repeat_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"
export FTRAIN_RESTART_BACKOFF_S=1
export FTRAIN_SPARE_NODES=1 FTRAIN_SPARE_NODELIST="${nodes[0]}"

t_submit="$(now_s)"
JOB_ID="$(FTRAIN_FAULT="stall@23:3,stall@28:3" \
  FTRAIN_ARGS="${E2E_TRAIN_ARGS} --guard.hang_floor_s=3" e2e_submit repeat --nodes=3 --no-kill)"
e2e_wait_done "${JOB_ID}" repeat
log "job done in $(elapsed_s "${t_submit}" "$(now_s)") s"
run="${WORK_DIR}/repeat"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued"
hung="${nodes[2]}"
[[ "$(grep -c "\"host\":\"${hung}\"" "${run}/hangs.jsonl")" == 2 ]] ||
  fail "expected two hang records naming ${hung}: $(cat "${run}/hangs.jsonl" 2>/dev/null)"
grep -q "a rank hung on ${hung} again (2 hang records within 6 h): quarantining ${hung}" \
  "${WORK_DIR}"/repeat-*.out || fail "ftrain job did not say that the hang repeated on ${hung}"
grep -q "\"host\":\"${hung}\".*\"cause\":\"hang\"\|\"cause\":\"hang\".*\"host\":\"${hung}\"" \
  "${run}/quarantine.jsonl" || fail "no quarantine line for ${hung}: $(cat "${run}/quarantine.jsonl" 2>/dev/null)"
rec="$(grep '"event":"restarted","cause":"quarantine"' "${run}/restarts.jsonl")" ||
  fail "no replacement record: $(cat "${run}/restarts.jsonl")"
[[ "${rec}" == *"\"node\":\"${hung}\",\"spare\":\"${nodes[0]}\""* ]] ||
  fail "the replacement record does not name the nodes: ${rec}"
[[ "$(grep -c "FTRAIN_FAULT: stalling" "${WORK_DIR}"/repeat-*.out)" == 2 ]] ||
  fail "expected the two stalls, once each"
e2e_expect_identical repeat
log "PASS: a hang repeated on ${hung} -> the spare ${nodes[0]} took its ranks -> bit-identical"
PASSED=1
