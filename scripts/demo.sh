#!/usr/bin/env bash
# The ftrain demo, from a fresh machine: installs dependencies, builds, starts the local Slurm
# cluster, runs the cluster health check (`ftrain commcheck`) as a 2-node x 2-rank `sbatch`
# job wired up through PMIx, prints its result, and prints `ftrain plan` for the seed's case
# (7B model, 8 nodes x 8 GPUs of 80 GB). Later stages of the project grow this into the full
# fault-tolerant training demo. Stops the cluster it started.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${FTRAIN_BUILD_DIR:-${ROOT}/build}"
OUT_DIR="${FTRAIN_DEMO_DIR:-${ROOT}/demo-out}"
NODES=2
RANKS_PER_NODE=2
JOB_TIMEOUT_S=300

cd "${ROOT}"
# ccache hits across clones in different directories (CI clones afresh).
export CCACHE_BASEDIR="${ROOT}"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "dependencies"
bash scripts/install-deps.sh

say "build (${BUILD_DIR})"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "${BUILD_DIR}/CMakeCache.txt" ]; then
  cmake -S . -B "${BUILD_DIR}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "${BUILD_DIR}" -j "$(nproc)" --target ftrain ckptctl h5zstd

say "local Slurm cluster: ${NODES} nodes x ${RANKS_PER_NODE} CPUs"
started=0
cleanup() {
  if [ "${started}" -eq 1 ]; then slurm/local-cluster.sh stop >/dev/null || true; fi
}
trap cleanup EXIT
if ! slurm/local-cluster.sh status >/dev/null 2>&1; then
  slurm/local-cluster.sh start --nodes "${NODES}" --cpus-per-node "${RANKS_PER_NODE}"
  started=1
fi
eval "$(slurm/local-cluster.sh env)"
export SLURM_CONF
sinfo

say "commcheck: ${NODES} nodes x ${RANKS_PER_NODE} ranks, srun --mpi=pmix"
mkdir -p "${OUT_DIR}"
job_out="${OUT_DIR}/commcheck-%j.out"
job_id="$(sbatch --parsable --job-name=ftrain-commcheck --nodes="${NODES}" \
  --ntasks-per-node="${RANKS_PER_NODE}" --output="${job_out}" --time=5 \
  --wrap="srun --mpi=pmix --kill-on-bad-exit=1 ${BUILD_DIR}/bin/ftrain commcheck --sizes 1M,16M --iters 3")"
echo "submitted job ${job_id}"
deadline=$((SECONDS + JOB_TIMEOUT_S))
while squeue -h -j "${job_id}" 2>/dev/null | grep -q .; do
  if ((SECONDS > deadline)); then
    echo "demo: job ${job_id} did not finish in ${JOB_TIMEOUT_S} s" >&2
    scancel "${job_id}" || true
    exit 1
  fi
  sleep 1
done
cat "${OUT_DIR}/commcheck-${job_id}.out"
grep -q "commcheck: OK" "${OUT_DIR}/commcheck-${job_id}.out" || {
  echo "demo: commcheck failed (see above)" >&2
  exit 1
}

say "ftrain plan: the seed's 7B case (8 nodes x 8 GPUs x 80 GB)"
"${BUILD_DIR}/bin/ftrain" plan --model configs/llama-7b.cfg --nodes 8 --gpus-per-node 8 \
  --gpu-mem-gb 80 --mtbf-hours 24 --ckpt-stall-s 13

say "done"
