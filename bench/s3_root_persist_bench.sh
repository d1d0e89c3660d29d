#!/usr/bin/env bash
# The persist throughput of ckpt.root = s3://... (printed, never pass/fail): trains the tiny
# model's shapes widened to ~12M parameters for one step with an S3 root on a loopback moto
# server, so that a real staged checkpoint (2 shards, zstd off: ~170 MB) lies in the staging
# root, then uploads that same step directory ROUNDS times, alternating, with
#   ftrain: `ckptctl mirror STEP_DIR s3://bench/ftrain-R --part-mb P --threads T`, the path
#           CommitStaged takes (S3CheckpointStore::Upload: each file's XXH3 checked against the
#           manifest, parts in parallel with a CRC32C each, the manifest put last with
#           If-None-Match), timed from the process start to its exit;
#   boto3:  upload_file of the same objects (the manifest's files, then the manifest) with TransferConfig(multipart_chunksize=P,
#           multipart_threshold=P, max_concurrency=T), timed inside Python (client creation
#           included, the interpreter's start not: boto3's favour),
# and prints each round's MB/s, the medians and ftrain/boto3. Loopback moto is not a real
# store: the numbers compare the clients' own cost, moto's included, not a network's.
# usage: bench/s3_root_persist_bench.sh [BIN_DIR]   (default: build/bin)
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN="${1:-${BIN}}"
ROOT="${BENCH_ROOT}"
PART_MB="${FTRAIN_S3_BENCH_PART_MB:-8}"
THREADS="${FTRAIN_S3_BENCH_THREADS:-4}"
ROUNDS="${FTRAIN_S3_BENCH_ROUNDS:-5}"
HIDDEN="${FTRAIN_S3_BENCH_HIDDEN:-512}"  # model.hidden_size: the checkpoint's size
bench_workdir s3-root-bench
bench_moto bench
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK}/data" /usr/share/common-licenses >/dev/null 2>&1

# One step with ckpt.root on S3: its final checkpoint is staged (and committed) by ftrain.
run="${WORK}/run"
"${BIN}/ftrain" launch --nproc 2 --nodes 1 -- train --config "${ROOT}/configs/tiny.cfg" \
  --data.path="${WORK}/data" --run.dir="${run}" --train.steps=1 --ckpt.every_minutes=0 \
  --ckpt.daemon=off --ckpt.zstd_level=0 --ckpt.root=s3://bench/seed \
  --model.hidden_size="${HIDDEN}" --model.intermediate_size="$((HIDDEN * 43 / 16))" \
  --model.num_layers=4 --ckpt.s3_part_mb="${PART_MB}" --ckpt.s3_threads="${THREADS}" \
  >"${run}.log" 2>&1 || { tail -20 "${run}.log" >&2; exit 1; }
step="${run}/ckpt-staging/step-00000001"
# What the upload sends: the manifest's files and the manifest (not receipts nor COMMIT).
mapfile -t files < <(python3 -c 'import json, sys
print("\n".join([f["path"] for f in json.load(open(sys.argv[1]))["files"]] + ["manifest.json"]))' \
  "${step}/manifest.json")
bytes="$(cd "${step}" && du -cb "${files[@]}" | tail -1 | cut -f1)"

boto3_once() {  # boto3_once PREFIX
  PYTHONPATH="${MOTO}" python3 - "${AWS_ENDPOINT_URL}" "${step}" "$1" "${PART_MB}" \
    "${THREADS}" "${bytes}" "${files[@]}" <<'PY'
import os, sys, time, boto3
from boto3.s3.transfer import TransferConfig
endpoint, step, prefix, part_mb, threads, total = sys.argv[1:7]
names = sys.argv[7:]
mb = int(part_mb) << 20
cfg = TransferConfig(multipart_threshold=mb, multipart_chunksize=mb,
                     max_concurrency=int(threads), use_threads=True)
t0 = time.perf_counter()
s3 = boto3.client("s3", endpoint_url=endpoint)
for name in names:
    s3.upload_file(os.path.join(step, name), "bench", f"{prefix}/{name}", Config=cfg)
print(f"boto3 MB/s {int(total) / (time.perf_counter() - t0) / 1e6:.1f}")
PY
}

ftrain_once() {  # ftrain_once PREFIX
  local t0 t1
  t0="$(date +%s.%N)"
  "${BIN}/ckptctl" mirror "${step}" "s3://bench/$1" --part-mb "${PART_MB}" \
    --threads "${THREADS}" >"${WORK}/mirror.log" 2>&1 || { cat "${WORK}/mirror.log" >&2; exit 1; }
  t1="$(date +%s.%N)"
  python3 -c "print(f'ftrain MB/s {${bytes} / (${t1} - ${t0}) / 1e6:.1f}')"
}

echo "== s3_root_persist_bench: a staged checkpoint of $((bytes >> 20)) MiB" \
  "(${#files[@]} objects), parts of ${PART_MB} MiB, ${THREADS} in flight," \
  "${ROUNDS} rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq 1 "${ROUNDS}"); do
  ftrain_once "ftrain-${round}" | tee -a "${WORK}/ftrain.txt"
  boto3_once "boto3-${round}" | tee -a "${WORK}/boto3.txt"
done
median() { awk '{print $3}' "$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f="$(median "${WORK}/ftrain.txt")"
b="$(median "${WORK}/boto3.txt")"
echo "median: ftrain ${f} MB/s, boto3 ${b} MB/s"
python3 -c "print(f'ftrain/boto3: {${f} / ${b}:.2f}x')"
