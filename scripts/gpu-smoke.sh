#!/usr/bin/env bash
# GPU smoke test, for a machine WITH NVIDIA GPUs (the CI machine has none). Builds ftrain
# against a CUDA LibTorch with the NCCL Comm, then:
#   1. `ftrain commcheck --backend nccl` on NPROC local ranks (one GPU each, cuda:<local_rank>):
#      all-reduce, all-gather, reduce-scatter and broadcast over NCCL on CUDA tensors, checked
#      element by element, with even and uneven sizes (the padded staging path), plus bandwidth;
#   2. a 2-step FSDP training run of configs/tiny.cfg on NPROC ranks and `ftrain eval` of its
#      checkpoint, with this CUDA build but over Gloo on CPU tensors.
# NOT exercised: FSDP training over NCCL. The engine, model and batches live on the CPU (there
# is no train.device yet), and NCCL needs CUDA tensors, so `ftrain train --dist.backend=nccl`
# is not run here. See docs/fsdp.md ("NCCL").
#
# usage: FTRAIN_LIBTORCH_CUDA=/opt/libtorch scripts/gpu-smoke.sh
#   FTRAIN_LIBTORCH_CUDA  a CUDA LibTorch 2.x (cxx11 ABI; the directory holding
#                         share/cmake/Torch), passed to CMake as -DCMAKE_PREFIX_PATH; default:
#                         the one scripts/install-deps.sh installs (docs/building.md)
#   FTRAIN_CUDA_ROOT      CUDA toolkit with nccl.h and libnccl (default /usr/local/cuda)
# The other build dependencies come from scripts/install-deps.sh.
# Exit codes: 0 passed, 1 a check failed, 2 setup error (no LibTorch), 77 skipped (no GPU).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIBTORCH_DIR="${FTRAIN_LIBTORCH_CUDA:-$(bash "${ROOT}/scripts/install-deps.sh" --torch-prefix)}"
CUDA_ROOT="${FTRAIN_CUDA_ROOT:-/usr/local/cuda}"
BUILD_DIR="${FTRAIN_GPU_BUILD_DIR:-${ROOT}/build-gpu}"
NPROC="${FTRAIN_GPU_SMOKE_NPROC:-2}"
# 4100B = 1025 float32: uneven over 2 ranks, so NCCL's padded all-gather/reduce-scatter runs.
SIZES="${FTRAIN_GPU_SMOKE_SIZES:-4100B,1M,64M}"
ITERS="${FTRAIN_GPU_SMOKE_ITERS:-5}"
JOBS="${FTRAIN_JOBS:-$(nproc)}"
WORK="$(mktemp -d /tmp/ftrain-gpu-smoke-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

log() { echo "== gpu-smoke: $*" >&2; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
  log "no nvidia-smi on PATH: this machine has no NVIDIA GPU (or no driver); nothing to test (skipped)"
  exit 77
fi
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [ "${gpus}" -lt "${NPROC}" ]; then
  log "nvidia-smi lists ${gpus} GPU(s), the smoke test needs ${NPROC} (FTRAIN_GPU_SMOKE_NPROC) (skipped)"
  exit 77
fi
if [ -z "${LIBTORCH_DIR}" ] || [ ! -f "${LIBTORCH_DIR}/share/cmake/Torch/TorchConfig.cmake" ]; then
  log "set FTRAIN_LIBTORCH_CUDA to an unpacked CUDA LibTorch 1.13.x (cxx11 ABI) directory, the one" \
    "holding share/cmake/Torch/TorchConfig.cmake (got '${LIBTORCH_DIR}')"
  exit 2
fi
if [ ! -f "${CUDA_ROOT}/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  log "no nccl.h under ${CUDA_ROOT}/include or /usr/include: install NCCL or set FTRAIN_CUDA_ROOT"
  exit 2
fi
log "${gpus} GPU(s); using ${NPROC}; LibTorch ${LIBTORCH_DIR}; CUDA ${CUDA_ROOT}; build ${BUILD_DIR}"
nvidia-smi -L >&2

log "configure and build (CUDA LibTorch, FTRAIN_WITH_NCCL=ON)"
cmake -S "${ROOT}" -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="${LIBTORCH_DIR}" -DFTRAIN_CUDA_ROOT="${CUDA_ROOT}" \
  -DCUDA_TOOLKIT_ROOT_DIR="${CUDA_ROOT}" -DFTRAIN_WITH_NCCL=ON >"${WORK}/cmake.log" 2>&1 ||
  { cat "${WORK}/cmake.log" >&2; exit 2; }
grep -q 'ftrain: NCCL ON' "${WORK}/cmake.log" || { log "CMake did not enable NCCL"; exit 2; }
cmake --build "${BUILD_DIR}" -j "${JOBS}" --target ftrain ftrain-data ckptctl
FTRAIN="${BUILD_DIR}/bin/ftrain"

log "1/2 commcheck over NCCL on CUDA tensors, ${NPROC} ranks, sizes ${SIZES}"
if ! "${FTRAIN}" launch --nproc "${NPROC}" -- commcheck --backend nccl --sizes "${SIZES}" \
  --iters "${ITERS}"; then
  log "FAILED: commcheck over NCCL"
  exit 1
fi

log "2/2 FSDP training (tiny, ${NPROC} ranks, Gloo on CPU tensors) + eval with this build"
"${FTRAIN}" pack --train-tokenizer --vocab-size 512 --seq-len 32 --progress none \
  --out "${WORK}/data" /usr/share/common-licenses >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }
if ! "${FTRAIN}" launch --nproc "${NPROC}" -- train --config "${ROOT}/configs/tiny.cfg" \
  --data.path="${WORK}/data" --run.dir="${WORK}/run" --train.steps=2 --ckpt.every_minutes=0 \
  --dist.sharding=full_shard --dist.backend=gloo; then
  log "FAILED: FSDP training over Gloo"
  exit 1
fi
if ! "${FTRAIN}" eval --config "${ROOT}/configs/tiny.cfg" --weights "${WORK}/run/checkpoints" \
  --data "${WORK}/data" --batches 4; then
  log "FAILED: eval of the checkpoint"
  exit 1
fi
log "OK: NCCL collectives on ${NPROC} GPUs correct; CUDA build trains and evaluates on CPU" \
  "(FSDP over NCCL not exercised: no train.device yet)"
