#!/usr/bin/env bash
# Layout gate (docs/design.md is the code map): fails when a source folder (a directory under
# src/ or daemon/ holding a tracked or new file) is not named in docs/design.md as `src/...`
# in backticks, or when docs/design.md names such a folder that does not exist; and when a
# library file below the mains reads the environment (getenv) without being one of the
# exceptions listed below with its reason: the launch facts (job, node, rank, fence epoch) come
# from records::LaunchContext, parsed once in each main; and when a library file below the
# mains calls Env::Default() (the one Env is made in the mains and passed down, as leveldb's
# Options::env). Run by scripts/check-style.sh (ctest `style`). Changes nothing.
# usage: scripts/check-layout.sh        (exit 0 clean, 1 findings, 2 not a git checkout)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DESIGN="docs/design.md"

cd "${ROOT}"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-layout: ${ROOT} is not a git checkout: the tracked files are unknown" >&2
  exit 2
fi

# Every folder that holds a file (tracked, or new and not ignored) and still exists.
mapfile -t actual < <(git ls-files --cached --others --exclude-standard -- src daemon |
  while IFS= read -r f; do
    if [ -e "${f}" ]; then dirname "${f}"; fi
  done | sort -u)
# Every folder the code map names: a backticked src/... or daemon path without a file name.
# shellcheck disable=SC2016  # the backticks are the pattern, not a command substitution
mapfile -t named < <(grep -o '`\(src\|daemon\)[A-Za-z0-9_/-]*`' "${DESIGN}" | tr -d '`' |
  sed 's:/*$::' | sort -u)

declare -A is_named=()
for d in "${named[@]}"; do is_named["${d}"]=1; done

failed=0
for d in "${actual[@]}"; do
  if [ -z "${is_named[${d}]:-}" ]; then
    echo "check-layout: ${d}/ holds code but ${DESIGN} does not name it: add it to the code map" >&2
    failed=1
  fi
done
for d in "${named[@]}"; do
  if [ ! -d "${d}" ]; then
    echo "check-layout: ${DESIGN} names ${d}/, which does not exist: fix the code map" >&2
    failed=1
  fi
done

# Library files that may read the environment, and why. Everything else gets its launch facts
# from records::LaunchContext (src/records/launch_context.cc, read in each main: src/cli/,
# daemon/ckptd_main.cc) and its settings from its config.
declare -A getenv_ok=(
  [src/records/launch_context.cc]="the one reader of the launch facts, called by the mains"
  [src/core/log.cc]="FTRAIN_LOG_LEVEL, read by InitLogLevel for every binary"
  [src/core/fault_inject.cc]="FTRAIN_FAULT: test-only fault injection"
  [src/core/env.cc]="FTRAIN_CRASH_TRACE: test-only crash points"
  [src/core/env_posix.cc]="FTRAIN_CRASH_AT/_RANK: test-only crash points"
  [src/comm/context.cc]="the rendezvous: who am I is comm/world.h's (PMIx, Slurm, torchrun)"
  [src/comm/gloo_comm.cc]="GLOO_SOCKET_IFNAME, Gloo's own variable"
  [src/comm/nccl_comm.cc]="NCCL's own variables, echoed in errors"
  [src/train/device/device.cc]="CUDA's and LibTorch's own variables, where the device is bound"
  [src/train/telemetry/gpu_health.cc]="CUDA_VISIBLE_DEVICES, CUDA's own, to name the GPU"
  [src/train/trainer.cc]="FTRAIN_SKIP_MEMORY_CHECK (test-only) and FTRAIN_HANG_IO_S, the deprecated override of guard.hang_io_s (one release)"
  [src/data/source/s3.cc]="the AWS credential chain (AWS_*), as the AWS SDKs read it"
  [src/data/pack/input_files_s3.cc]="FTRAIN_S3_PART_BYTES: test-only part size"
  [src/orch/settings.cc]="ProcessEnv(): the controller's Getenv, handed in by the mains; EnvOr(): the I/O runners' FTRAIN_* knobs"
  [src/orch/slurm.cc]="TMPDIR for the Slurm CLI's scratch files"
)
# The C++ files below the mains (not src/cli/, not a *_main.cc) that hold the fixed string $1.
below_mains_holding() {
  git ls-files --cached --others --exclude-standard -- src daemon |
    grep -E '\.(cc|h)$' | grep -v -E '^src/cli/|_main\.cc$' |
    while IFS= read -r f; do
      if [ -e "${f}" ] && grep -F "$1" "${f}" >/dev/null; then echo "${f}"; fi
    done
}
mapfile -t readers < <(below_mains_holding 'getenv(')
for f in "${readers[@]}"; do
  if [ -z "${getenv_ok[${f}]:-}" ]; then
    echo "check-layout: ${f} reads the environment (getenv) below the mains: take the value" \
      "from records::LaunchContext or the component's config, or list the file here with why" >&2
    failed=1
  fi
done

# Library files that may call Env::Default(), and why. Everything else takes its Env from its
# caller (a constructor argument or an options field), ultimately from a main (src/cli/,
# daemon/ckptd_main.cc) or a test.
declare -A env_default_ok=(
  [src/core/env_posix.cc]="defines Env::Default()"
  [src/core/env.h]="declares Env::Default() and says what FTRAIN_CRASH_AT makes it"
)
mapfile -t env_fetchers < <(below_mains_holding 'Env::Default(')
for f in "${env_fetchers[@]}"; do
  if [ -z "${env_default_ok[${f}]:-}" ]; then
    echo "check-layout: ${f} calls Env::Default() below the mains: take the Env from the" \
      "caller (a constructor argument or an options field), or list the file here with why" >&2
    failed=1
  fi
done
if [ "${failed}" -eq 0 ]; then
  echo "check-layout: ${#actual[@]} source folders, each named in ${DESIGN};" \
    "${#readers[@]} library files read the environment, each a listed exception;" \
    "${#env_fetchers[@]} call Env::Default(), each a listed exception"
fi
exit "${failed}"
