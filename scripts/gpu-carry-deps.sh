#!/usr/bin/env bash
# gpu-carry-deps.sh - makes the set of Debian packages that scripts/gpu-check.sh needs on a bare
# GPU image (CMake, ninja, nvcc, python3 with torch; no Debian -dev packages): the -dev packages
# its configure and build of ftrain, ckptctl and ckptd need, and the runtime libraries those
# three binaries load that the image may lack. It `apt-get download`s them into FTRAIN_DEB_DIR
# (default shared/debs: shared/ travels to the device machine with the working tree), checks
# their total size against the budget (FTRAIN_DEB_BUDGET_MIB, default 60: the tree that travels
# may hold 64 MiB in all), and unpacks them with `dpkg -x` into FTRAIN_DEB_PREFIX (default
# build/deb-root, gpu-check's default; on the device gpu-check unpacks them itself).
# scripts/gpu-carry-rehearse.sh proves the set complete (a build with Debian's own hidden).
# The list is also in docs/building.md (a test compares them).
#   gpu-carry-deps.sh          download, check the budget, unpack
#   gpu-carry-deps.sh --list   print the package names, one a line
# Exit: 0 done, 1 over budget or a download/unpack failed, 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEB_DIR="${FTRAIN_DEB_DIR:-${ROOT}/shared/debs}"
DEB_PREFIX="${FTRAIN_DEB_PREFIX:-${ROOT}/build/deb-root}"
BUDGET_MIB="${FTRAIN_DEB_BUDGET_MIB:-60}"

# What the configure and the build need (headers, CMake/pkg-config files, protoc, static
# gtest), then the runtime libraries of ftrain/ckptctl/ckptd beyond glibc, libstdc++, libgcc
# and zlib (`ldd build/bin/ftrain` here, mapped to their packages; LibTorch, CUDA and NCCL
# come with the image's torch).
DEV_PACKAGES=(
  libgloo-dev
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 libhdf5-hl-cpp-100 libaec-dev
  libzstd-dev zlib1g-dev libssl-dev libxxhash-dev libsentencepiece-dev libpcre2-dev libicu-dev
  libboost-program-options-dev libboost-program-options1.74-dev libboost1.74-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev libcurl4-openssl-dev libpmix-dev
  libprotobuf-dev protobuf-compiler libprotoc32 prometheus-cpp-dev
  pkgconf pkgconf-bin libpkgconf3
)
RUNTIME_PACKAGES=(
  libhdf5-103-1 libsz2 libaec0 libsentencepiece0 libpcre2-8-0 libzstd1 libxxhash0 libssl3
  libboost-program-options1.74.0 libprotobuf32 libprotobuf-lite32 libprometheus-cpp-core1.0
  libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libudev1 libmunge2
  libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libbrotli1 libldap-2.5-0 libsasl2-2
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  libgnutls30 libnettle8 libhogweed6 libgmp10 libp11-kit0 libtasn1-6 libidn2-0 libunistring2
  libffi8 libicu72
)

packages() { printf '%s\n' "${DEV_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}" | awk '!seen[$0]++'; }

case "${1:-}" in
  --list) packages; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--list]" >&2; exit 2 ;;
esac

log() { echo "== gpu-carry-deps: $*" >&2; }
mapfile -t list < <(packages)
mkdir -p "${DEB_DIR}"
rm -f "${DEB_DIR}"/*.deb
log "downloading ${#list[@]} packages into ${DEB_DIR}"
(cd "${DEB_DIR}" && apt-get download -q "${list[@]}") >&2 ||
  { log "FAILED: apt-get download (run apt-get update first?)"; exit 1; }
total="$(du -cb "${DEB_DIR}"/*.deb | tail -n 1 | cut -f1)"
mib="$(awk -v b="${total}" 'BEGIN {printf "%.1f", b / 1048576}')"
if ((total > BUDGET_MIB * 1048576)); then
  log "FAILED: the .deb files take ${mib} MiB, over the ${BUDGET_MIB} MiB budget (FTRAIN_DEB_BUDGET_MIB)"
  du -b "${DEB_DIR}"/*.deb | sort -rn | head -n 5 >&2
  exit 1
fi
log "${#list[@]} .deb files, ${mib} MiB of the ${BUDGET_MIB} MiB budget"
rm -rf "${DEB_PREFIX}"
mkdir -p "${DEB_PREFIX}"
for f in "${DEB_DIR}"/*.deb; do dpkg -x "${f}" "${DEB_PREFIX}"; done
log "unpacked into ${DEB_PREFIX} ($(du -sh "${DEB_PREFIX}" | cut -f1))"
