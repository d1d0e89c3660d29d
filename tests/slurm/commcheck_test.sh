#!/usr/bin/env bash
# commcheck_test.sh - `ftrain commcheck` as a 2-node, 2-tasks-per-node `sbatch` job on the
# local Slurm cluster, wired up through PMIx (srun --mpi=pmix): every collective must check
# out on the world, intra-node and inter-node groups, and every rank must report that it
# found its place through PMIx. Then a rank that reaches the PMIx fence 60 s late: the other
# gives up after --rdzv-timeout 3 by itself (Slurm's plugin would wait). Exit 0 pass, 1 fail,
# 77 skip (no Slurm tools).
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="commcheck_test"
FTRAIN="${FTRAIN_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/bin/ftrain}"
IDLE_TIMEOUT_S=60
JOB_TIMEOUT_S=240
SIZES="4,4004,1M"     # uneven element counts on purpose

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

JOB_ID=""
WORK_DIR=""
PASSED=0
cleanup() {
  local rc=$?
  cancel_job "${JOB_ID}"
  work_dir_cleanup
  exit "${rc}"
}
trap cleanup EXIT

[[ -x "${FTRAIN}" ]] || fail "ftrain binary not found at ${FTRAIN}; build first"
slurm_test_start "${IDLE_TIMEOUT_S}"

JOB_ID="$(sbatch --parsable --job-name=ftrain-commcheck --nodes=2 --ntasks-per-node=2 \
  --output="${WORK_DIR}/job.out" --time=5 --chdir="${WORK_DIR}" \
  --wrap="srun --mpi=pmix --kill-on-bad-exit=1 ${FTRAIN} commcheck --sizes ${SIZES} --iters 2 --json")" ||
  fail "sbatch failed"
log "submitted job ${JOB_ID}"
wait_for_job_state "${JOB_ID}" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" \
  "${JOB_TIMEOUT_S}"
state="$(job_state "${JOB_ID}")"
cat "${WORK_DIR}/job.out"
[[ "${state}" == "COMPLETED" ]] || fail "job ${JOB_ID} ended ${state}"

out="${WORK_DIR}/job.out"
pmix_ranks="$(grep -c 'dist: source=pmix' "${out}" || true)"
((pmix_ranks == 4)) || fail "expected 4 ranks discovered through PMIx, saw ${pmix_ranks}"
grep -q '"num_nodes":2' "${out}" || fail "commcheck did not see 2 nodes"
grep -q '"world_size":4' "${out}" || fail "commcheck did not see 4 ranks"
grep -q '"group":"intra_node","group_size":2' "${out}" || fail "intra-node group is not 2 ranks"
grep -q '"group":"inter_node","group_size":2' "${out}" || fail "inter-node group is not 2 ranks"
for coll in all_reduce all_gather reduce_scatter broadcast; do
  grep -q "\"collective\":\"${coll}\"" "${out}" || fail "no result for ${coll}"
done
grep -q 'pmix namespace' "${out}" || fail "the rendezvous did not go through PMIx"
log "4 ranks on 2 nodes, rendezvous through PMIx, every collective correct"

# A rank that does not reach the PMIx fence (here: it starts 60 s late): Slurm's PMIx plugin
# ignores the ranks' PMIX_TIMEOUT and would hold the fence until it came (or PMIxTimeout,
# 300 s); the waiting rank gives up by itself after --rdzv-timeout, naming the setting, and
# --kill-on-bad-exit ends the late one before it ever starts.
JOB_ID="$(sbatch --parsable --job-name=ftrain-fence --nodes=2 --ntasks-per-node=1 \
  --output="${WORK_DIR}/fence.out" --time=5 --chdir="${WORK_DIR}" \
  --wrap="srun --mpi=pmix --kill-on-bad-exit=1 bash -c 'if [ \"\${SLURM_PROCID}\" = 1 ]; then sleep 60; fi; exec ${FTRAIN} commcheck --sizes 4 --iters 1 --rdzv-timeout 3'")" ||
  fail "sbatch (fence) failed"
log "submitted job ${JOB_ID}: rank 1 starts 60 s late, --rdzv-timeout 3"
wait_for_job_state "${JOB_ID}" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" \
  "${JOB_TIMEOUT_S}"
state="$(job_state "${JOB_ID}")"
out="${WORK_DIR}/fence.out"
cat "${out}"
[[ "${state}" == "FAILED" ]] || fail "fence job ${JOB_ID} ended ${state}, not FAILED: rank 0 waited for the late rank"
grep -q 'PMIx fence of namespace .* did not complete in 3 s (dist.rdzv_timeout_s' "${out}" ||
  fail "rank 0 did not give up the PMIx fence after --rdzv-timeout 3, naming the setting"
if grep -q 'dist: source=pmix rank=1' "${out}"; then fail "the late rank started: nobody gave up on it"; fi
log "PASS: a PMIx fence with a missing rank gives up after the ranks' own rendezvous timeout"
PASSED=1
