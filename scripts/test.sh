#!/usr/bin/env bash
# Runs the whole ftrain test suite from a fresh clone: installs dependencies, builds, starts
# the local Slurm cluster the `slurm` tests need, runs ctest, and stops what it started.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -L unit, -R Plan).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${FTRAIN_BUILD_DIR:-${ROOT}/build}"
JOBS="${FTRAIN_JOBS:-$(nproc)}"
CTEST_JOBS="${FTRAIN_CTEST_JOBS:-1}"          # the process, Slurm and GPU tiers
LIGHT_JOBS="${FTRAIN_LIGHT_JOBS:-$(nproc)}"   # the *-light tests: one core each (tests/CMakeLists.txt)
UNIT_JOBS="${FTRAIN_UNIT_JOBS:-$(nproc)}"     # the unit tier: in-process, its own temp dirs
CLUSTER_NODES="${FTRAIN_TEST_NODES:-4}"     # 4: the spare topology test needs two spares
CLUSTER_CPUS="${FTRAIN_TEST_CPUS_PER_NODE:-2}"

cd "${ROOT}"
# ccache hits across clones in different directories (CI clones afresh).
export CCACHE_BASEDIR="${ROOT}"
echo "== test.sh: dependencies"
bash scripts/install-deps.sh

echo "== test.sh: build (${BUILD_DIR}, ${JOBS} jobs)"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "${BUILD_DIR}/CMakeCache.txt" ]; then
  cmake -S . -B "${BUILD_DIR}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFTRAIN_LIBTORCH_PREFIX="$(bash scripts/install-deps.sh --torch-prefix)"
fi
cmake --build "${BUILD_DIR}" -j "${JOBS}"

echo "== test.sh: local Slurm cluster (${CLUSTER_NODES} nodes x ${CLUSTER_CPUS} cpus)"
started_cluster=0
cleanup() {
  if [ "${started_cluster}" -eq 1 ]; then
    echo "== test.sh: stopping the local Slurm cluster"
    slurm/local-cluster.sh stop || echo "test.sh: warning: local-cluster.sh stop failed" >&2
  fi
}
trap cleanup EXIT
if ! slurm/local-cluster.sh status >/dev/null 2>&1; then
  slurm/local-cluster.sh start --nodes "${CLUSTER_NODES}" --cpus-per-node "${CLUSTER_CPUS}"
  started_cluster=1
fi
eval "$(slurm/local-cluster.sh env)"
export SLURM_CONF

echo "== test.sh: ctest"
# Without arguments, the whole suite in three tiers: the unit tests (in-process) in parallel;
# the "-light" process tests (one core each, own ports and directories) nproc at a time; then
# the training runs, daemons and the local Slurm cluster's tests one at a time. Every tier
# runs even when one before failed; the script fails if any did.
rc=0
if [ "$#" -gt 0 ]; then
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j "${CTEST_JOBS}" "$@" || rc=1
else
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j "${UNIT_JOBS}" -L unit || rc=1
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j "${LIGHT_JOBS}" -L -light || rc=1
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j "${CTEST_JOBS}" -LE 'unit|-light' || rc=1
fi
[ "${rc}" -eq 0 ]
