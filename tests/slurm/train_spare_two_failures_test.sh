#!/usr/bin/env bash
# train_spare_two_failures_test.sh - two node failures, one spare: `sbatch --nodes=3 --no-kill`
# with FTRAIN_SPARE_NODES=1 (the default spare: the last node). The first training node to
# crash is replaced by the spare inside the allocation; the second (the spare, now training)
# finds no spare left and train.sh falls back to the requeue. Still bit-identical to the
# uninterrupted reference; restarts.jsonl has the replacement and the requeue. Between the two,
# the replication ring re-forms: the replaced node's predecessor replicates to the spare.
# Needs a cluster of >= 3 nodes (FTRAIN_TEST_NODES). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_two_failures_test"
FAIL1_AT_STEP=12
FAIL2_AT_STEP=38

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"

export FTRAIN_SPARE_NODES=1
JOB_ID="$(e2e_submit two --nodes=3 --no-kill)"
wait_for_file_lines "${WORK_DIR}/two/metrics.jsonl" "${FAIL1_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
log "failure 1: fail-node ${nodes[1]} at step ~${FAIL1_AT_STEP} (spare ${nodes[2]})"
e2e_freeze_ranks two
old_pids="$(e2e_rank_pids two | paste -sd' ')"
e2e_fail_node "${nodes[1]}"
e2e_thaw_ranks two
# (the tiny model would otherwise finish before the second failure)
e2e_freeze_relaunched two 4 "${old_pids}" 120
# train.sh writes the failure's records just after the relaunch (the lost-work figures are
# computed meanwhile): a few seconds at most.
poll_until 15 grep -q '"event":"restarted","cause":"node_failure"' "${WORK_DIR}/two/restarts.jsonl" ||
  fail "ranks relaunched without a replacement record: $(cat "${WORK_DIR}/two/restarts.jsonl")"
e2e_revive_node  # back in the cluster, not in the job: the requeue below needs it
# The ring re-formed without ${nodes[1]}: its predecessor ${nodes[0]} (ranks 0,1) replicates to
# ${nodes[2]} now, no longer to the dead node.
e2e_freeze_settled two "${nodes[2]}" "0 1"
e2e_thaw_ranks two
wait_for_file_lines "${WORK_DIR}/two/metrics.jsonl" "${FAIL2_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the first failure requeued the job"
log "failure 2: fail-node ${nodes[2]} (the spare, now training) at step ~${FAIL2_AT_STEP}"
e2e_freeze_ranks two
e2e_fail_node "${nodes[2]}"
e2e_thaw_ranks two
wait_for_restarts "${JOB_ID}" 1 120
e2e_revive_node
e2e_wait_done "${JOB_ID}" two

grep -q "\"event\":\"restarted\",\"cause\":\"node_failure\",\"node\":\"${nodes[1]}\",\"spare\":\"${nodes[2]}\"" \
  "${WORK_DIR}/two/restarts.jsonl" || fail "no replacement record: $(cat "${WORK_DIR}/two/restarts.jsonl")"
grep -q "\"event\":\"step_failed\",\"cause\":\"node_failure\",\"node\":\"${nodes[2]}\"" \
  "${WORK_DIR}/two/restarts.jsonl" || fail "no record of the second failure"
grep -q '"event":"requeued","cause":"node_failure"' "${WORK_DIR}/two/restarts.jsonl" ||
  fail "no requeue record: $(cat "${WORK_DIR}/two/restarts.jsonl")"
grep -q 'no spare is left: requeueing' "${WORK_DIR}"/two-*.out || fail "train.sh did not requeue"
e2e_expect_identical two
log "PASS: the spare replaced ${nodes[1]}; the loss of ${nodes[2]} fell back to the requeue; bit-identical"
PASSED=1
