#!/usr/bin/env bash
# The ftrain demo, from a fresh machine: installs dependencies, builds, starts the local Slurm
# cluster (2 nodes x 2 CPUs), runs the cluster health check (`ftrain commcheck`) as a 2-node
# `sbatch` job through PMIx, prints `ftrain plan` for the seed's case (7B, 8 x 8 GPUs of
# 80 GB), builds a corpus from the text under /usr/share, trains a tokenizer and packs it,
# then runs `sbatch slurm/train.sh` twice: a reference job, and the same job with a node
# crash injected mid-run (`local-cluster.sh fail-node`). Slurm requeues it, it resumes from
# the newest complete checkpoint, and `ckptctl diff` shows the two final checkpoints are
# bit-identical. Stops the cluster it started.
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
cmake --build "${BUILD_DIR}" -j "$(nproc)" --target ftrain ftrain-data ckptctl ckptd h5zstd

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

say "corpus: text under /usr/share/common-licenses and /usr/share/doc -> tokenizer -> shards"
DATA="${OUT_DIR}/data"
if [ ! -f "${DATA}/index.json" ]; then
  "${BUILD_DIR}/bin/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 \
    --skip-invalid-utf8 --progress plain --out "${DATA}" /usr/share/common-licenses \
    /usr/share/doc/bash /usr/share/doc/git
fi
"${BUILD_DIR}/bin/ftrain" data inspect "${DATA}" | head -n 12

STEPS=60
export FTRAIN_HOME="${ROOT}" FTRAIN_BIN="${BUILD_DIR}/bin/ftrain" CKPTCTL_BIN="${BUILD_DIR}/bin/ckptctl"
export CKPTD_BIN="${BUILD_DIR}/bin/ckptd"
export FTRAIN_CONFIG="${ROOT}/configs/tiny.cfg" FTRAIN_DATA="${DATA}" FTRAIN_RANKS_PER_NODE="${RANKS_PER_NODE}"
export FTRAIN_ARGS="--train.steps=${STEPS} --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=hybrid_shard"
submit() {  # submit NAME -> job id
  FTRAIN_RUN_DIR="${OUT_DIR}/$1" sbatch --parsable --job-name="ftrain-$1" --nodes="${NODES}" \
    --ntasks-per-node="${RANKS_PER_NODE}" --output="${OUT_DIR}/$1-%j.out" --time=10 \
    --export=ALL --chdir="${OUT_DIR}" slurm/train.sh
}
wait_job() {  # wait_job JOBID: until it leaves the queue; prints its final state
  local deadline=$((SECONDS + JOB_TIMEOUT_S))
  while squeue -h -j "$1" 2>/dev/null | grep -q .; do
    ((SECONDS < deadline)) || { scancel "$1" || true; echo "TIMEOUT"; return; }
    sleep 1
  done
  scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || echo UNKNOWN
}
rm -rf "${OUT_DIR}/reference" "${OUT_DIR}/failure" "${OUT_DIR}"/reference-*.out "${OUT_DIR}"/failure-*.out

say "reference job: sbatch slurm/train.sh (${NODES} nodes x ${RANKS_PER_NODE} ranks, ${STEPS} steps)"
ref_job="$(submit reference)"
echo "job ${ref_job}: $(wait_job "${ref_job}")"
tail -n 3 "${OUT_DIR}"/reference-*.out

say "the same job, with a node crash in the middle"
fail_job="$(submit failure)"
fail_metrics="$("${BUILD_DIR}/bin/ftrain" paths "${OUT_DIR}/failure" --get metrics)"
until [ "$( (wc -l <"${fail_metrics}") 2>/dev/null || echo 0)" -ge 22 ]; do
  if ! squeue -h -j "${fail_job}" 2>/dev/null | grep -q .; then
    echo "demo: job ${fail_job} ended before the node failure could be injected:" >&2
    tail -n 20 "${OUT_DIR}"/failure-*.out >&2
    exit 1
  fi
  sleep 0.5
done
victim="$(scontrol show hostnames "$(squeue -h -j "${fail_job}" -o %N)" | tail -n 1)"
echo "step $(wc -l <"${fail_metrics}"): SIGKILL of ${victim}'s slurmd and all its job processes"
slurm/local-cluster.sh fail-node "${victim}"
until scontrol -o show job "${fail_job}" | grep -q 'Restarts=1'; do sleep 1; done
echo "Slurm noticed, marked ${victim} down and requeued job ${fail_job}; bringing ${victim} back"
slurm/local-cluster.sh revive-node "${victim}"
echo "job ${fail_job}: $(wait_job "${fail_job}")"

# Where each run keeps its files: from the binary (`ftrain paths`), not a copy here.
run_path() { "${BUILD_DIR}/bin/ftrain" paths "${OUT_DIR}/$1" --get "$2"; }
say "checkpoints went through one ckptd per node (slurm/agent.sh); the last saves of each daemon"
for f in "$(run_path failure logs)"/ckptd-*.log; do
  echo "-- ${f##*/}"
  grep 'persisted step' "${f}" | tail -n 2
done

say "what happened (restart record)"
cat "$(run_path failure restarts)"
say "ckptctl list + verify"
"${BUILD_DIR}/bin/ckptctl" list "$(run_path failure checkpoints)"
"${BUILD_DIR}/bin/ckptctl" verify "$(run_path failure checkpoints)" --all
say "ckptctl diff: reference vs. interrupted, final checkpoints"
"${BUILD_DIR}/bin/ckptctl" diff "$(run_path reference checkpoints)/step-000000${STEPS}" \
  "$(run_path failure checkpoints)/step-000000${STEPS}"

say "done"
