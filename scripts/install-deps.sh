#!/usr/bin/env bash
# Installs every Debian package ftrain's build, tests and demo need. Idempotent: when all
# packages are already present it returns in well under a second without touching apt.
# Run as root (CI and the demo do). Does not build anything.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev
  libhdf5-dev hdf5-tools
  libzstd-dev zstd zlib1g-dev
  libxxhash-dev
  libsentencepiece-dev sentencepiece
  libboost-program-options-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  libcurl4-openssl-dev
  libpmix-dev
  slurm-wlm slurmd slurmctld slurm-client
  munge libmunge-dev
  nginx-light
  python3 python3-h5py python3-numpy python3-zstandard
  util-linux procps psmisc iproute2 curl
  shellcheck
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run this script as root (or install them with apt-get)" >&2
  exit 2
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be stale or absent on a fresh machine.
apt-get update -q
# Slurm and munge must not start their own daemons from the package scripts: our
# local-cluster.sh runs them with its own configuration. policy-rc.d 101 forbids starts.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  created_policy=1
fi
trap '[ "$created_policy" -eq 1 ] && rm -f "$policy"' EXIT
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
