#!/usr/bin/env bash
# train_rank_kill_memory_tier_test.sh - the memory tier (issue 35) with healthy nodes: 2 nodes x
# 2 ranks, no spares and FTRAIN_REPLICATION left at auto (the memory tier in the config turns
# buddy replication on: without a buddy no step counts as restorable from memory; the job's
# log must say so), a disk checkpoint every 50
# steps and a memory snapshot every 3; one rank is SIGKILLed at a random step. train.sh
# restarts the step in the allocation; every rank restores from its own daemon the newest
# step restorable from memory, at most one memory interval (+1 step, the record's lag) behind
# the crash, and the run ends bit-identical. FTRAIN_TEST_SEED reproduces a run.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_rank_kill_memory_tier_test"
MEMORY_EVERY=3
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=50 --ckpt.every_minutes=0 --ckpt.memory_every_steps=${MEMORY_EVERY} --dist.sharding=full_shard"
SEED="${FTRAIN_TEST_SEED:-$(($(date +%s) % 100000))}"
KILL_AT_STEP=$((8 + SEED % 30))  # 8..37 of 60, before the disk checkpoint of step 50

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_RESTART_BACKOFF_S=1
unset FTRAIN_REPLICATION

log "seed ${SEED}: SIGKILL a rank at step ~${KILL_AT_STEP} (FTRAIN_TEST_SEED=${SEED} reproduces)"
JOB_ID="$(e2e_submit mkill)"
wait_for_file_lines "${WORK_DIR}/mkill/metrics.jsonl" "${KILL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
pids="$(e2e_rank_pids mkill)"
[[ "$(wc -w <<<"${pids}")" == 4 ]] || fail "expected 4 ranks, found pids: ${pids}"
victim="$(awk '{print $NF}' <<<"${pids}" | tail -n1)"
kill -KILL "${victim}"
crash_step="$(wc -l <"${WORK_DIR}/mkill/metrics.jsonl")"
log "SIGKILLed rank pid ${victim} after step ${crash_step}"
e2e_wait_done "${JOB_ID}" mkill
grep -q "buddy replication on" "${WORK_DIR}"/mkill-*.out ||
  fail "FTRAIN_REPLICATION=auto with the memory tier on did not turn buddy replication on"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued (Restarts=$(e2e_restarts "${JOB_ID}"))"
resumed="$(sed -n '/"event":"restarted","cause":"rank_failure"/,$p' "${WORK_DIR}/mkill/restarts.jsonl" |
  grep '"event":"resumed"' | head -n 1)"
[[ -n "${resumed}" ]] || fail "no resume after the in-job restart: $(cat "${WORK_DIR}/mkill/restarts.jsonl")"
restored="$(sed -E 's/.*"step":([0-9]+),.*/\1/' <<<"${resumed}")"
((restored == 50)) || [[ "${resumed}" == *'"tier":"memory"'* ]] ||
  fail "the restart did not restore from the memory tier: ${resumed}"
lost=$((crash_step - restored))
((lost >= 0 && lost <= MEMORY_EVERY + 1)) ||
  fail "crashed after step ${crash_step}, restored step ${restored}: more than one memory interval lost"
[[ "${resumed}" == *'"ranks_from_memory":4,'* ]] || fail "not every rank restored from memory: ${resumed}"
e2e_expect_identical mkill
log "PASS: rank SIGKILLed after step ${crash_step}; restored step ${restored} from memory (${lost} steps lost) in the allocation, bit-identical"
PASSED=1
