#!/usr/bin/env bash
# train_spare_memory_tier_test.sh - the memory tier (issue 35) with a hot spare and Slurm's
# default timeouts: `sbatch --nodes=3 --no-kill slurm/train.sh` with FTRAIN_SPARE_NODES=1 on
# 2 nodes x 2 ranks, a disk checkpoint every 50 steps, a memory snapshot every 3
# (ckpt.memory_every_steps); a training node crashes (fail-node) at a random step: the ranks
# are stopped (SIGSTOP) the moment the step is reached, since the tiny model runs ~10 steps a
# second and fail-node takes a while under load (the run once finished before the crash), but
# the daemons are not: what they have in flight when the node dies is lost. The job
# continues on the spare (never requeued), the
# survivors restore from their own daemons and the spare from its copy as the dead node's
# buddy; the step restored is tier "memory", at most one memory interval (+1 step, the
# record's lag behind the buddy's acknowledgement) behind the crash; `ftrain report` shows it;
# the run ends bit-identical to the uninterrupted reference. FTRAIN_TEST_SEED reproduces a run.
# Needs a cluster of >= 3 nodes (FTRAIN_TEST_NODES). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_memory_tier_test"
MEMORY_EVERY=3
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=50 --ckpt.every_minutes=0 --ckpt.memory_every_steps=${MEMORY_EVERY} --dist.sharding=full_shard"
SEED="${FTRAIN_TEST_SEED:-$(($(date +%s) % 100000))}"
FAIL_AT_STEP=$((8 + SEED % 30))  # 8..37 of 60, before the disk checkpoint of step 50

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"
e2e_use_timeouts 300 10

export FTRAIN_SPARE_NODES=1 FTRAIN_SPARE_NODELIST="${nodes[0]}"
log "seed ${SEED}: crash training node ${nodes[2]} at step ~${FAIL_AT_STEP}, spare ${nodes[0]} (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit memtier --nodes=3 --no-kill)"
wait_for_file_lines "${WORK_DIR}/memtier/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
e2e_freeze_ranks memtier
crash_step="$(wc -l <"${WORK_DIR}/memtier/metrics.jsonl")"
e2e_fail_node "${nodes[2]}"
e2e_thaw_ranks memtier
log "crashed ${nodes[2]} after step ${crash_step}"
wait_for 120 "the replacement record" grep -q '"event":"restarted","cause":"node_failure"' \
  "${WORK_DIR}/memtier/restarts.jsonl"
e2e_wait_done "${JOB_ID}" memtier

[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued ($(e2e_restarts "${JOB_ID}") restarts)"
resumed="$(sed -n '/"event":"restarted","cause":"node_failure"/,$p' "${WORK_DIR}/memtier/restarts.jsonl" |
  grep '"event":"resumed"' | head -n 1)"
restored="$(sed -E 's/.*"step":([0-9]+),.*/\1/' <<<"${resumed}")"
# The ranks run on while the node is failed: a crash past step 50 rightly resumes the newer
# disk checkpoint; anything else must come from the memory tier.
((restored == 50)) || [[ "${resumed}" == *'"tier":"memory"'* ]] ||
  fail "the replacement did not restore from the memory tier: ${resumed}"
lost=$((crash_step - restored))
((lost >= 0 && lost <= MEMORY_EVERY + 1)) ||
  fail "crashed after step ${crash_step}, restored step ${restored}: more than one memory interval lost"
[[ "${resumed}" == *'"ranks_from_peer":2,'* ]] || fail "ranks 2,3 did not fetch from the spare's memory: ${resumed}"
report="$("${E2E_BIN}/ftrain" report "${WORK_DIR}/memtier")"
grep -q "memory tier (step ${restored})" <<<"${report}" || fail "ftrain report does not show the memory tier"
e2e_expect_identical memtier
log "PASS: ${nodes[2]} crashed after step ${crash_step}; restored step ${restored} from memory (${lost} steps lost), on spare ${nodes[0]}, bit-identical"
PASSED=1
