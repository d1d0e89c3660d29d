#!/usr/bin/env bash
# Checkpoint upload to object storage: ftrain's multipart upload (bench/s3_upload_bench.cc,
# the mirror's path: parallel parts, a CRC32C per part) against boto3's upload_file with a
# TransferConfig of the same part size and concurrency, to the same moto server (started here
# on a free loopback port) in the same run, alternating, ROUNDS each. Prints each tool's median
# MB/s and the ratio (printed, never pass/fail). Loopback moto is not a real store: the numbers
# show each client's own cost, moto's included, not a network's.
# usage: bench/s3_ckpt_bench.sh [BIN_DIR]   (default: build/bin)
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN="${1:-${BIN}}"
SIZE_MB="${FTRAIN_S3_BENCH_MB:-256}"
PART_MB="${FTRAIN_S3_BENCH_PART_MB:-8}"
THREADS="${FTRAIN_S3_BENCH_THREADS:-4}"
ROUNDS="${FTRAIN_S3_BENCH_ROUNDS:-3}"
bench_workdir s3-ckpt-bench
bench_moto bench
# Incompressible bytes, like a zstd-compressed shard.
head -c "$((SIZE_MB << 20))" /dev/urandom >"${WORK}/shard.h5"

boto3_once() {
  PYTHONPATH="${MOTO}" python3 - "${AWS_ENDPOINT_URL}" "${WORK}/shard.h5" "${PART_MB}" "${THREADS}" <<'PY'
import os, sys, time, boto3
from boto3.s3.transfer import TransferConfig
endpoint, path, part_mb, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mb = part_mb << 20
cfg = TransferConfig(multipart_threshold=mb, multipart_chunksize=mb, max_concurrency=threads,
                     use_threads=True)
s3 = boto3.client("s3", endpoint_url=endpoint)
t0 = time.perf_counter()
s3.upload_file(path, "bench", "boto3/shard.h5", Config=cfg)
print(f"boto3 MB/s {os.path.getsize(path) / (time.perf_counter() - t0) / 1e6:.1f}")
PY
}

echo "== s3_ckpt_bench: ${SIZE_MB} MiB, parts of ${PART_MB} MiB, ${THREADS} in flight," \
  "${ROUNDS} rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for _ in $(seq 1 "${ROUNDS}"); do
  "${BIN}/s3_upload_bench" "${WORK}/shard.h5" s3://bench/ftrain/shard.h5 "${PART_MB}" \
    "${THREADS}" 1 | tee -a "${WORK}/ftrain.txt"
  boto3_once | tee -a "${WORK}/boto3.txt"
done
median() { awk '{print $3}' "$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f="$(median "${WORK}/ftrain.txt")"
b="$(median "${WORK}/boto3.txt")"
echo "median: ftrain ${f} MB/s, boto3 ${b} MB/s"
python3 -c "print(f'ftrain/boto3: {${f} / ${b}:.2f}x')"
