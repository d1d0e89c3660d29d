#!/usr/bin/env bash
# Installs every Debian package ftrain's build, tests and demo need, the CUDA-enabled
# LibTorch from the pinned `torch` wheel on PyPI (unpacked with pip into a machine-wide prefix,
# /opt/ftrain/torch-<version>, shared by every clone; see docs/building.md), and the pinned
# `tensorboard` package the metrics tests read event files back with (pip --target
# /opt/ftrain/py-tensorboard-<version>; nothing goes into a system Python). Idempotent: when
# everything is present it returns in well under a second without touching apt or pip.
# Run as root (CI and the demo do). Does not build anything.
#   install-deps.sh                 install what is missing
#   install-deps.sh --torch-prefix  print the LibTorch prefix (for -DCMAKE_PREFIX_PATH)
set -euo pipefail

TORCH_VERSION="${FTRAIN_TORCH_VERSION:-2.11.0}"  # CUDA 13 build on PyPI; matches the H200 image
TORCH_PREFIX="${FTRAIN_TORCH_PREFIX:-/opt/ftrain/torch-${TORCH_VERSION}}"
TENSORBOARD_VERSION="${FTRAIN_TENSORBOARD_VERSION:-2.21.0}"  # tests/CMakeLists.txt has the path
TENSORBOARD_PREFIX="${FTRAIN_TENSORBOARD_PREFIX:-/opt/ftrain/py-tensorboard-${TENSORBOARD_VERSION}}"
# The Hugging Face reference clients the interop tests compare against (transformers loads
# ftrain's exports and computes the reference loss; tokenizers produces the reference tokens).
# 5.17.0 is what the GPU image has. PYTHONPATH=${HF_PREFIX}:${TORCH_PREFIX} (transformers runs
# its models on the torch wheel's Python package, already unpacked there).
TRANSFORMERS_VERSION="${FTRAIN_TRANSFORMERS_VERSION:-5.17.0}"
TOKENIZERS_VERSION="${FTRAIN_TOKENIZERS_VERSION:-0.23.3}"
HF_PREFIX="${FTRAIN_HF_PREFIX:-/opt/ftrain/py-transformers-${TRANSFORMERS_VERSION}}"
# The local S3 server the object-storage tests start (moto_server; boto3 comes with it and
# creates the buckets): PYTHONPATH=${MOTO_PREFIX}. tests/CMakeLists.txt has the path.
MOTO_VERSION="${FTRAIN_MOTO_VERSION:-5.2.1}"
MOTO_PREFIX="${FTRAIN_MOTO_PREFIX:-/opt/ftrain/py-moto-${MOTO_VERSION}}"
if [ "${1:-}" = "--torch-prefix" ]; then
  echo "${TORCH_PREFIX}/torch"
  exit 0
fi
if [ "${1:-}" = "--hf-pythonpath" ]; then
  echo "${HF_PREFIX}:${TORCH_PREFIX}"
  exit 0
fi

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgloo-dev
  libhdf5-dev hdf5-tools
  libzstd-dev zstd zlib1g-dev
  libssl-dev  # ckptd peer handshake: RAND_bytes, HMAC-SHA256, CRYPTO_memcmp (libcrypto)
  libxxhash-dev
  libsentencepiece-dev sentencepiece
  libpcre2-dev  # Hugging Face tokenizer.json pre-tokenizer regexes (Unicode properties)
  libicu-dev    # tokenizer.json normalizers: NFC/NFD/NFKC/NFKD (ICU's Normalizer2)
  libboost-program-options-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  libcurl4-openssl-dev
  libpmix-dev
  libprotobuf-dev protobuf-compiler prometheus-cpp-dev
  slurm-wlm slurmd slurmctld slurm-client
  munge libmunge-dev
  nginx-light
  python3 python3-h5py python3-numpy python3-zstandard python3-prometheus-client
  python3-sentencepiece  # bench/tokenizer_bench.sh: the .model peer (same 0.1.97 as the library)
  util-linux procps psmisc iproute2 curl
  shellcheck clang-format
  librsvg2-bin fonts-dejavu-core  # ftrain report: the SVG test renders it to PNG
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# pip_install_into PREFIX MARKER SPEC WHAT: installs the PyPI requirement SPEC (with its
# dependencies; SPEC may hold several space-separated requirements) into its own PREFIX with pip --target, unless MARKER (a file inside PREFIX)
# shows it is there. Built in PREFIX.tmp.PID and moved into place, so an interrupted install
# never looks complete. PIP_BREAK_SYSTEM_PACKAGES only matters for Debian's own python3
# (nothing is installed into it).
pip_install_into() {
  local prefix="$1" marker="$2" spec="$3" what="$4"
  if [ -f "${marker}" ]; then
    echo "install-deps: ${what} present in ${prefix}"
    return 0
  fi
  local py=python3
  if ! "${py}" -m pip --version >/dev/null 2>&1; then
    apt-get install -y -q --no-install-recommends python3-pip
    py=/usr/bin/python3
  fi
  echo "install-deps: installing ${spec} (${what}) into ${prefix}"
  local tmp="${prefix}.tmp.$$" start
  start=$(date +%s)
  rm -rf "${tmp}"
  mkdir -p "$(dirname "${prefix}")"
  # shellcheck disable=SC2086 # SPEC splits into its requirements
  PIP_BREAK_SYSTEM_PACKAGES=1 "${py}" -m pip install -q --no-compile --disable-pip-version-check \
    --target "${tmp}" ${spec}
  rm -rf "${prefix}"
  mv "${tmp}" "${prefix}"
  echo "install-deps: ${what} installed in $(($(date +%s) - start)) s"
}

# --target keeps torch/ and nvidia/ side by side: libtorch_cuda.so finds cuDNN, NCCL,
# cuBLAS... through its $ORIGIN/../../nvidia RPATH.
install_torch() {
  pip_install_into "${TORCH_PREFIX}" "${TORCH_PREFIX}/torch/share/cmake/Torch/TorchConfig.cmake" \
    "torch==${TORCH_VERSION}" "LibTorch ${TORCH_VERSION} (CUDA)"
}

# The tensorboard PyPI package (EventAccumulator reads the trainer's event files in the
# tests): PYTHONPATH=${TENSORBOARD_PREFIX}.
install_tensorboard() {
  pip_install_into "${TENSORBOARD_PREFIX}" "${TENSORBOARD_PREFIX}/tensorboard/version.py" \
    "tensorboard==${TENSORBOARD_VERSION}" "tensorboard ${TENSORBOARD_VERSION}"
}

# transformers + tokenizers (and safetensors, numpy, huggingface_hub with them): ~170 MB,
# ~10 s from PyPI here.
install_transformers() {
  pip_install_into "${HF_PREFIX}" "${HF_PREFIX}/transformers/__init__.py" \
    "transformers==${TRANSFORMERS_VERSION} tokenizers==${TOKENIZERS_VERSION}" \
    "transformers ${TRANSFORMERS_VERSION}"
}

# moto[server] (flask, werkzeug, boto3, botocore...): see docs/data.md "Object storage (S3)".
install_moto() {
  pip_install_into "${MOTO_PREFIX}" "${MOTO_PREFIX}/moto/server.py" \
    "moto[server]==${MOTO_VERSION}" "moto ${MOTO_VERSION}"
}

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  install_torch
  install_tensorboard
  install_transformers
  install_moto
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
install_torch
install_tensorboard
install_transformers
install_moto
echo "install-deps: done"
