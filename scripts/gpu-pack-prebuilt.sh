#!/usr/bin/env bash
# gpu-pack-prebuilt.sh - packs this machine's build for a device lease, so that the lease spends
# its minutes on the GPU and not on compiling (~140 LibTorch units): stripped copies of ftrain,
# ftrain-torch, ftrain-data, ckptctl, ckptd, gpu_test, comm_fault_test and the HDF5 zstd
# plugin, plus every shared library they load that is not LibTorch's, CUDA's or the base
# system's (glibc, libstdc++, libgcc, zlib), into one .tar.xz that `run` carries and
# scripts/gpu-lease.sh unpacks. The binaries are built against the pinned torch wheel
# (2.11.0+cu130), the same build the H200 image's python3 has; the lease points the RUNPATH
# prefix (/opt/ftrain/torch-<v>) at the image's site-packages.
#   gpu-pack-prebuilt.sh [OUT_TAR]   (default .gpu/prebuilt.tar.xz; .gpu/ is git-ignored locally)
# Settings: FTRAIN_BUILD_DIR (default build). Exit 0 packed, 1 a binary is missing, 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FTRAIN_BUILD_DIR:-${ROOT}/build}"
OUT_TAR="${1:-${ROOT}/.gpu/prebuilt.tar.xz}"
BINARIES=(ftrain ftrain-torch ftrain-data ckptctl ckptd gpu_test comm_fault_test)
# Resolved outside these, a library is carried.
BASE='^/(usr/)?lib/x86_64-linux-gnu/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64)\.so'

log() { echo "== gpu-pack-prebuilt: $*" >&2; }
(($# <= 1)) || { echo "usage: $0 [OUT_TAR]" >&2; exit 2; }
stage="$(mktemp -d /tmp/ftrain-prebuilt-XXXXXX)"
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/build/bin" "${stage}/build/carried-libs"
for b in "${BINARIES[@]}"; do
  [[ -x "${BUILD}/bin/${b}" ]] || { log "missing ${BUILD}/bin/${b}: build it first"; exit 1; }
  strip --strip-unneeded -o "${stage}/build/bin/${b}" "${BUILD}/bin/${b}"
done
# The HDF5 filter plugin, where the binaries look for it (relative to build/).
plugin="$(cd "${BUILD}" && find . -name 'libh5zstd*.so*' -print | head -n 1)"
if [[ -n "${plugin}" ]]; then
  mkdir -p "${stage}/build/$(dirname "${plugin}")"
  strip --strip-unneeded -o "${stage}/build/${plugin}" "${BUILD}/${plugin}"
fi
mapfile -t libs < <(for b in "${BINARIES[@]}"; do ldd "${BUILD}/bin/${b}"; done |
  awk '/=> \// {print $3}' | sort -u |
  grep -Ev "${BASE}" | grep -v '/torch/' | grep -v '/nvidia/' | grep -v '^/usr/local/cuda' || true)
for l in "${libs[@]}"; do cp -L "${l}" "${stage}/build/carried-libs/"; done
log "${#BINARIES[@]} binaries, ${#libs[@]} libraries: $(du -sh "${stage}" | cut -f1) unpacked"
mkdir -p "$(dirname "${OUT_TAR}")"
tar -C "${stage}" -cf - build | xz -T2 -6 >"${OUT_TAR}"
log "wrote ${OUT_TAR} ($(du -h "${OUT_TAR}" | cut -f1))"
