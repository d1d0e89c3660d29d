#!/usr/bin/env bash
# gpu_carry_test.sh - the GPU check's carried .deb set: docs/building.md lists exactly what
# scripts/gpu-carry-deps.sh downloads; then the cheap form of the rehearsal: the set
# downloaded into a temporary directory (size checked against the budget) and
# `scripts/gpu-carry-rehearse.sh --configure-only` (gpu-check's configure with Debian's -dev
# packages hidden) must pass. Skips (77) the second part when not root or apt cannot
# download. Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "gpu_carry_test: FAIL: $*" >&2; exit 1; }
skip() { echo "gpu_carry_test: SKIP: $*" >&2; exit 77; }

listed="$(bash "${ROOT}/scripts/gpu-carry-deps.sh" --list | paste -sd' ')"
documented="$(sed -n '/<!-- carried-debs -->/,/<!-- \/carried-debs -->/p' "${ROOT}/docs/building.md" |
  grep -v '^<!--\|^```' | tr -s ' \n' '  ' | sed 's/ $//')"
[[ -n "${listed}" && "${listed}" == "${documented}" ]] ||
  fail "docs/building.md's carried-debs list differs from scripts/gpu-carry-deps.sh --list:
  script: ${listed}
  docs:   ${documented}"
echo "gpu_carry_test: docs/building.md lists the $(wc -w <<<"${listed}") carried packages"

(($(id -u) == 0)) || skip "the rehearsal needs root"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-gpu-carry.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
export FTRAIN_DEB_DIR="${WORK}/debs" FTRAIN_DEB_PREFIX="${WORK}/root"
export FTRAIN_GPU_BUILD_DIR="${WORK}/build"
if ! bash "${ROOT}/scripts/gpu-carry-deps.sh" >"${WORK}/deps.log" 2>&1; then
  grep -q 'over the .* budget' "${WORK}/deps.log" && { cat "${WORK}/deps.log" >&2; fail "over budget"; }
  skip "apt-get download failed (offline?): $(tail -n 2 "${WORK}/deps.log")"
fi
grep 'MiB of the' "${WORK}/deps.log"
bash "${ROOT}/scripts/gpu-carry-rehearse.sh" --configure-only ||
  fail "gpu-check's configure needs something the carried set lacks (above)"
echo "gpu_carry_test: PASS"
