#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage_* functions run through `--stage NAME`
# gpu-lease.sh - the one command a device lease runs (docs/performance.md#gpu): on a bare H200
# image, with the binaries built here and carried (scripts/gpu-pack-prebuilt.sh), it runs the
# checks in order of value, each under its own time limit, a failure recorded and the next
# stage run anyway, and leaves everything it learns under $OUT:
#   env      nvidia-smi, the image's torch, the binaries' libraries (ldd)
#   check    scripts/gpu-check.sh on the carried binaries: NCCL commcheck, bf16 training with
#            ckptd, SIGKILL mid-step + resume bit-identical, tokens/s, MFU, stall vs D2H copy,
#            phases, the Kineto trace, the Hugging Face model in/stop/resume/eval
#   layers   bench/gpu_layers.sh: the 7B-shaped layers, ftrain against the FSDP2 peer
#   tests    gpu_test (NCCL vs host values, D2H copies, stop/resume) and comm_fault_test
# Output: $OUT/summary.txt (each stage's exit code, time and key lines; printed at the end) and
# $OUT/logs.tar.gz (every log, metrics.jsonl and the bench rows).
#   gpu-lease.sh [STAGE...]     (default: env check layers tests)
# Settings: FTRAIN_LEASE_TAR (default .gpu/prebuilt.tar.xz), FTRAIN_LEASE_LIMITS
# ("check=170 layers=140 ..." seconds per stage), FTRAIN_GPU_LAYERS_VARIANTS (bench/gpu_layers.sh).
# FTRAIN_LEASE_DRY=1: the rehearsal on a machine without a GPU (the check as its --dry-run).
# Exit: 0 every stage passed, 1 one failed (see summary.txt), 2 setup.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/ftrain-lease-out}"
TAR="${FTRAIN_LEASE_TAR:-${ROOT}/.gpu/prebuilt.tar.xz}"
# The stages run as `gpu-lease.sh --stage NAME` in a session of their own (run_stage), with
# WORK and the library path that the setup exported.
if [[ "${1:-}" == --stage ]]; then INNER_STAGE="$2"; set --; fi
export WORK="${WORK:-$(mktemp -d /tmp/ftrain-lease-XXXXXX)}"
LOGS="${WORK}/logs"
declare -A LIMIT=([env]=30 [check]=170 [layers]=140 [tests]=60)
for kv in ${FTRAIN_LEASE_LIMITS:-}; do LIMIT[${kv%%=*}]="${kv#*=}"; done
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(env check layers tests)
mkdir -p "${OUT}" "${LOGS}"
SUMMARY="${OUT}/summary.txt"
[[ -n "${INNER_STAGE:-}" ]] || : >"${SUMMARY}"
note() { echo "$*" >>"${SUMMARY}"; }
FAILED=0

# Runs a stage in its own session, so that a time limit ends it with everything it started
# (ckptd, ranks); its exit code and time go to the summary.
run_stage() {  # NAME
  local name="$1" limit="${LIMIT[$1]:-60}" t0=${SECONDS} pid rc
  setsid bash "${BASH_SOURCE[0]}" --stage "${name}" >"${LOGS}/${name}.log" 2>&1 &
  pid=$!
  while kill -0 "${pid}" 2>/dev/null; do
    if ((SECONDS - t0 >= limit)); then
      note "stage ${name}: time limit ${limit} s reached, killing its session"
      kill -TERM -- "-${pid}" 2>/dev/null
      sleep 3
      kill -KILL -- "-${pid}" 2>/dev/null
      break
    fi
    sleep 1
  done
  wait "${pid}"
  rc=$?
  note "stage ${name}: exit ${rc} in $((SECONDS - t0)) s"
  ((rc == 0)) || FAILED=1
  return 0
}

# The carried build: unpacked into the tree, its RUNPATH prefix mapped onto the image's torch,
# its compiled-in source path onto this tree. Every carried library is used, also where the
# image has one of the same name: the image's libsentencepiece (Ubuntu's 0.1.99) under a
# binary built against Debian's 0.1.97 aborted in protobuf on the first lease.
setup() {
  local site
  [[ -f "${TAR}" ]] || { note "setup: no ${TAR} (run scripts/gpu-pack-prebuilt.sh and carry .gpu)"; exit 2; }
  python3 -c 'import lzma, tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "${TAR}" "${ROOT}" || { note "setup: cannot unpack ${TAR}"; exit 2; }
  site="$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')" ||
    { note "setup: python3 has no torch"; exit 2; }
  mkdir -p /opt/ftrain
  [[ -e /opt/ftrain/torch-2.11.0 ]] || ln -s "${site}" /opt/ftrain/torch-2.11.0
  if [[ ! -e /work/main ]]; then mkdir -p /work && ln -s "${ROOT}" /work/main; fi
  # NCCL and the CUDA runtime from the image's wheels, the ones its torch loads (ftrain-torch
  # links both directly; its RUNPATH names /usr/local/cuda, which may lack NCCL).
  local wheels
  wheels="$(find "${site}/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | paste -sd:)"
  export LD_LIBRARY_PATH="${ROOT}/build/carried-libs${wheels:+:${wheels}}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  if ldd "${ROOT}"/build/bin/* 2>&1 | grep 'not found' >&2; then
    note "setup: a library of the binaries is missing (above)"
  fi
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
  note "setup: torch site ${site}; LD_LIBRARY_PATH=${LD_LIBRARY_PATH}"
}

stage_env() {
  set +e  # every probe, whatever the one before it said
  nvidia-smi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name(0))'
  uname -a
  head -n 3 /etc/os-release
  nproc
  free -g
  ulimit -l
  df -h /dev/shm /tmp
  for b in "${ROOT}"/build/bin/*; do echo "== ${b}"; ldd "${b}"; done
  "${ROOT}/build/bin/ftrain" --version
}

stage_check() {
  if [[ "${FTRAIN_LEASE_DRY:-0}" == 1 ]]; then  # a rehearsal here, without a GPU
    FTRAIN_BIN_DIR="${ROOT}/build/bin" FTRAIN_GPU_CHECK_SKIP="tests" \
      FTRAIN_GPU_CHECK_DIR="${WORK}/check" bash "${ROOT}/scripts/gpu-check.sh" --dry-run
    return
  fi
  FTRAIN_GPU_BIN_DIR="${ROOT}/build/bin" FTRAIN_GPU_CHECK_SKIP="tests" \
    FTRAIN_GPU_CHECK_DIR="${WORK}/check" bash "${ROOT}/scripts/gpu-check.sh"
}

stage_layers() {
  local data="${WORK}/data-4096" src="${WORK}/text-4096"
  mkdir -p "${src}"
  python3 "${ROOT}/scripts/synthetic-corpus.py" "${src}/corpus.txt"
  "${ROOT}/build/bin/ftrain" pack --train-tokenizer --vocab-size 8000 --seq-len 4096 \
    --progress none --out "${data}" "${src}" >/dev/null || return 1
  FTRAIN_BIN_DIR="${ROOT}/build/bin" bash "${ROOT}/bench/gpu_layers.sh" "${data}" "${WORK}/layers"
}

stage_tests() {
  local t rc=0
  for t in comm_fault_test gpu_test; do
    echo "== ${t}"
    (cd "${WORK}" && "${ROOT}/build/bin/${t}" --gtest_brief=1) || rc=1
  done
  return "${rc}"
}

if [[ -n "${INNER_STAGE:-}" ]]; then
  set -e
  "stage_${INNER_STAGE}"
  exit
fi
for s in "${STAGES[@]}"; do
  declare -F "stage_${s}" >/dev/null || { echo "unknown stage ${s}" >&2; exit 2; }
done
setup
for s in "${STAGES[@]}"; do run_stage "${s}"; done
# The lines worth reading first: the check's numbers and verdicts, the bench table.
{
  echo "---- check"
  grep -E '^== gpu-check: (FAIL|PASS|bit-identical|resumed|killed|HF run)|^(tokens/s|baseline|parameters|checkpoint (stall|hand-over)|device-to-host|step phases|profiler trace|metrics.jsonl health)' \
    "${LOGS}/check.log" 2>/dev/null
  grep -E 'attention:|device: ' "${WORK}/check/ref.log" 2>/dev/null | head -n 3
  echo "---- layers"
  sed -n '/^variant /,$p' "${LOGS}/layers.log" 2>/dev/null
  grep -E 'FAILED|Error|error' "${LOGS}/layers.log" 2>/dev/null | head -n 5
  echo "---- tests"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "${LOGS}/tests.log" 2>/dev/null
} >>"${SUMMARY}"
# Everything else, compressed (metrics, logs, bench rows; not the checkpoints or the data).
tar -C "${WORK}" --exclude='checkpoints' --exclude='data*' --exclude='*.bin' --exclude='hf-model' \
  -czf "${OUT}/logs.tar.gz" . 2>/dev/null
cat "${SUMMARY}"
exit "${FAILED}"
