#!/usr/bin/env bash
# gpu-carry-rehearse.sh - proves the carried .deb set (scripts/gpu-carry-deps.sh) complete before
# a GPU lease depends on it. In a private mount namespace /usr is overlaid so that every file of
# Debian's -dev packages (all but the C/C++ toolchain's own: libc6-dev, libstdc++-N-dev,
# libgcc-N-dev, linux-libc-dev, libcrypt-dev, libnsl-dev, libtirpc-dev) and of the carried
# build tools (protoc, pkg-config, h5cc) is gone, as on the GPU image; there it runs
# `scripts/gpu-check.sh --build-only` (or --configure-only), which configures and builds
# ftrain, ckptctl and ckptd the way the device check does, from the carried prefix alone.
# After a build it checks that every library the three binaries load comes from the prefix,
# LibTorch/CUDA, or the base system every image has (glibc, libstdc++, libgcc, zlib).
#   gpu-carry-rehearse.sh [--configure-only]
# Settings: FTRAIN_DEB_DIR / FTRAIN_DEB_PREFIX (as gpu-check.sh; run gpu-carry-deps.sh first),
# FTRAIN_GPU_BUILD_DIR (default build/gpu-rehearsal), FTRAIN_TORCH_PYTHONPATH (where python3
# finds torch; default install-deps.sh's /opt/ftrain/torch-2.11.0).
# Needs root (unshare, overlayfs). Exit: 0 complete, 1 something is missing (named), 2 usage
# or setup (gpu-check's own exit 2 included: a configure or build that failed is exit 2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=--build-only
case "${1:-}" in
  --configure-only) MODE=--configure-only; shift ;;
  "") ;;
  *) echo "usage: $0 [--configure-only]" >&2; exit 2 ;;
esac
(($# == 0)) || { echo "usage: $0 [--configure-only]" >&2; exit 2; }
export FTRAIN_DEB_DIR="${FTRAIN_DEB_DIR:-${ROOT}/shared/debs}"
export FTRAIN_DEB_PREFIX="${FTRAIN_DEB_PREFIX:-${ROOT}/build/deb-root}"
export FTRAIN_GPU_BUILD_DIR="${FTRAIN_GPU_BUILD_DIR:-${ROOT}/build/gpu-rehearsal}"
TORCH_PYTHONPATH="${FTRAIN_TORCH_PYTHONPATH:-/opt/ftrain/torch-2.11.0}"
TOOLCHAIN_DEV='^(libc6-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|linux-libc-dev|libcrypt-dev|libnsl-dev|libtirpc-dev)$'
CARRIED_TOOLS=(protobuf-compiler libprotoc32 pkgconf pkgconf-bin pkg-config hdf5-helpers)

log() { echo "== gpu-carry-rehearse: $*" >&2; }
(($(id -u) == 0)) || { log "needs root (a private mount namespace with an overlay on /usr)"; exit 2; }
command -v unshare >/dev/null || { log "needs unshare (util-linux)"; exit 2; }
compgen -G "${FTRAIN_DEB_DIR}/*.deb" >/dev/null || [[ -d "${FTRAIN_DEB_PREFIX}/usr/include" ]] ||
  { log "no carried set in ${FTRAIN_DEB_DIR} or ${FTRAIN_DEB_PREFIX}: run scripts/gpu-carry-deps.sh"; exit 2; }

if [[ "${FTRAIN_REHEARSE_INSIDE:-0}" != "1" ]]; then
  # Everything below runs again inside the namespace; its mounts vanish with it.
  args=()
  if [[ "${MODE}" == --configure-only ]]; then args=(--configure-only); fi
  scratch="$(mktemp -d /tmp/ftrain-rehearse-XXXXXX)"  # a tmpfs inside, gone with the namespace
  rc=0
  FTRAIN_REHEARSE_INSIDE=1 FTRAIN_REHEARSE_SCRATCH="${scratch}" \
    unshare --mount --propagation private -- bash "$0" "${args[@]}" || rc=$?
  rmdir "${scratch}" 2>/dev/null || true
  exit "${rc}"
fi

# ---- inside the namespace --------------------------------------------------------------------
mapfile -t hidden < <(
  dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\n' | awk -F'\t' '$2 ~ /^ii/ {print $1}' |
    { grep -E -- '-dev$' | grep -Ev "${TOOLCHAIN_DEV}"; printf '%s\n' "${CARRIED_TOOLS[@]}"; } |
    sort -u)
scratch="${FTRAIN_REHEARSE_SCRATCH:?}"
mount -t tmpfs ftrain-rehearse "${scratch}"
mkdir -p "${scratch}/upper" "${scratch}/work"
# A whiteout (char device 0:0) in the overlay's upper dir hides the lower file.
python3 - "${scratch}/upper" "${hidden[@]}" <<'PY'
import os, stat, sys
upper, pkgs = sys.argv[1], sys.argv[2:]
n = 0
for pkg in pkgs:
    for name in (f"/var/lib/dpkg/info/{pkg}.list", f"/var/lib/dpkg/info/{pkg}:amd64.list"):
        if not os.path.exists(name):
            continue
        for path in open(name).read().split("\n"):
            if not path or not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)):
                continue
            real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            if not real.startswith("/usr/"):
                continue
            w = os.path.join(upper, real[len("/usr/"):])
            os.makedirs(os.path.dirname(w), exist_ok=True)
            if not os.path.lexists(w):
                os.mknod(w, stat.S_IFCHR | 0o600, os.makedev(0, 0))
                n += 1
print(f"== gpu-carry-rehearse: hid {n} files of {len(pkgs)} packages", file=sys.stderr)
PY
mount -t overlay ftrain-rehearse-usr \
  -o "lowerdir=/usr,upperdir=${scratch}/upper,workdir=${scratch}/work" /usr
[[ ! -e /usr/include/zstd.h && ! -e /usr/bin/protoc ]] ||
  { log "the overlay did not hide Debian's headers and tools"; exit 2; }
log "Debian's -dev packages hidden; gpu-check.sh ${MODE} from ${FTRAIN_DEB_PREFIX}"
export PYTHONPATH="${TORCH_PYTHONPATH}${PYTHONPATH:+:${PYTHONPATH}}"
export FTRAIN_GPU_CHECK_DIR="${scratch}/check"
mkdir -p "${FTRAIN_GPU_CHECK_DIR}"
rc=0
bash "${ROOT}/scripts/gpu-check.sh" "${MODE}" || rc=$?
if ((rc != 0)); then
  log "FAILED: gpu-check.sh ${MODE} exit ${rc} without Debian's -dev packages: the carried set lacks what it names above"
  exit "${rc}"
fi
[[ "${MODE}" == --build-only ]] || { log "PASS: configured from the carried set alone"; exit 0; }

# Every library the binaries load: from the prefix, LibTorch/CUDA, or the base system.
lib="${FTRAIN_DEB_PREFIX}/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="${lib}:${lib}/hdf5/serial:${FTRAIN_DEB_PREFIX}/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
bad="$(for b in ftrain ckptctl ckptd; do ldd "${FTRAIN_GPU_BUILD_DIR}/bin/${b}"; done |
  awk '/=>/ {print $1, $3}' | sort -u | while read -r name path; do
    case "${path}" in
      not) echo "${name} (not found)" ;;
      "${FTRAIN_DEB_PREFIX}"/* | /opt/* | /usr/local/cuda* | *torch*) ;;
      *) pkg="$(dpkg -S "${path}" 2>/dev/null || dpkg -S "/usr${path}" 2>/dev/null || true)"
        [[ "${pkg%%:*}" =~ ^(libc6|libstdc\+\+6|libgcc-s1|zlib1g)$ ]] || echo "${name} (${path}, ${pkg%%:*})" ;;
    esac
  done)"
[[ -z "${bad}" ]] || { log "FAILED: loaded from outside the carried set: ${bad//$'\n'/; }"; exit 1; }
if ! "${FTRAIN_GPU_BUILD_DIR}/bin/ftrain" paths "${scratch}/run" >/dev/null ||
  ! "${FTRAIN_GPU_BUILD_DIR}/bin/ckptctl" --help >/dev/null; then
  log "FAILED: the binaries built from the carried set do not run"
  exit 1
fi
log "PASS: built from the carried set alone; every library the binaries load is carried or base"
