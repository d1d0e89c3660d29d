#!/usr/bin/env bash
# Collective bus bandwidth over 2 and 4 local ranks (Gloo over loopback TCP) for 1 MB..256 MB,
# next to the memcpy bandwidth of this machine measured in the same run: the physical limit
# of collectives between processes on one host. Prints a table; numbers go in
# docs/performance.md. Usage: bench/comm_bench.sh [BUILD_DIR]
set -euo pipefail

BUILD_DIR="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}"
SIZES="${FTRAIN_BENCH_SIZES:-1M,4M,16M,64M,256M}"
RANKS="${FTRAIN_BENCH_RANKS:-2 4}"
ITERS="${FTRAIN_BENCH_ITERS:-5}"
FTRAIN="${BUILD_DIR}/bin/ftrain"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

"${BUILD_DIR}/bin/memcpy_bench" $((256 << 20)) 10 >"${TMP}/memcpy.json"
for n in ${RANKS}; do
  "${FTRAIN}" launch --nproc "${n}" -- commcheck --no-groups --json --iters "${ITERS}" \
    --sizes "${SIZES}" >"${TMP}/comm-${n}.json" 2>"${TMP}/comm-${n}.log" ||
    { cat "${TMP}/comm-${n}.log" >&2; exit 1; }
done
# RANKS is a list of rank counts ("1 2 4"): split into one argument each on purpose.
# shellcheck disable=SC2086
python3 - "${TMP}" ${RANKS} <<'PY'
import json, sys, os
tmp, ranks = sys.argv[1], sys.argv[2:]
mem = json.load(open(os.path.join(tmp, "memcpy.json")))["memcpy_gbps"]
print(f"memcpy bandwidth (1 thread, 256 MB): {mem:.2f} GB/s  (GB = 1e9 bytes)")
print(f"{'ranks':>5} {'collective':<15} {'size':>8} {'time_ms':>9} {'busbw_GB/s':>11} {'busbw/memcpy':>13}")
for n in ranks:
    doc = json.loads(open(os.path.join(tmp, f"comm-{n}.json")).read().strip().splitlines()[-1])
    for r in doc["results"]:
        size = f"{r['bytes'] / 2**20:.0f}M"
        print(f"{n:>5} {r['collective']:<15} {size:>8} {r['time_s']*1e3:9.2f} "
              f"{r['busbw_gbps']:11.3f} {r['busbw_gbps']/mem:13.3f}")
PY
