#!/usr/bin/env bash
# Training-loop numbers (printed, never pass/fail): `ftrain train` of configs/small.cfg under
# `ftrain launch` with N = 1, 2, 4 local ranks (Gloo), read back from metrics.jsonl: median and
# p95 of step time (checkpoint stall excluded), data wait and communication wait; synchronous
# checkpoint stall per GB of state; scaling efficiency. Per-rank micro-batch is fixed, so N
# ranks do N times the work of one rank per step; E = T1 / (N x TN) with TN the time N ranks
# need for the work one rank does in T1 (TN = step time / N), i.e. E = step_1 / step_N
# (1.0 = perfect; N ranks on fewer cores than N cannot exceed cores / N).
# The first step of every run is warm-up and not counted; checkpoints land on steps
# CKPT_EVERY, 2 x CKPT_EVERY, ... and the final step.
# usage: bench/train_bench.sh   (after `ninja -C build ftrain ftrain-data ckptctl`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_TRAIN_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_TRAIN_BENCH_SEQ_LEN:-128}"
MICRO_BATCH="${FTRAIN_TRAIN_BENCH_MICRO_BATCH:-1}"
STEPS="${FTRAIN_TRAIN_BENCH_STEPS:-8}"
CKPT_EVERY="${FTRAIN_TRAIN_BENCH_CKPT_EVERY:-4}"
RANKS="${FTRAIN_TRAIN_BENCH_RANKS:-1 2 4}"
SHARDING="${FTRAIN_TRAIN_BENCH_SHARDING:-full_shard}"
VOCAB="${FTRAIN_TRAIN_BENCH_VOCAB:-2000}"  # <= model.vocab_size
CORPUS=/usr/share/common-licenses
WORK="$(mktemp -d /tmp/ftrain-train-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== train_bench: $(basename "${CONFIG}"), seq_len ${SEQ_LEN}, micro-batch ${MICRO_BATCH} per rank," \
  "${STEPS} steps, checkpoint every ${CKPT_EVERY}, ${SHARDING}, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${BIN}/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/data" "${CORPUS}" >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }

for n in ${RANKS}; do
  start=$(date +%s)
  "${BIN}/ftrain" launch --nproc "${n}" -- train --config "${CONFIG}" \
    --data.path="${WORK}/data" --run.dir="${WORK}/run-${n}" --train.steps="${STEPS}" \
    --train.micro_batch="${MICRO_BATCH}" --train.grad_accum=1 --train.warmup_steps=2 \
    --ckpt.every_steps="${CKPT_EVERY}" --ckpt.every_minutes=0 --ckpt.keep=2 \
    --dist.sharding="${SHARDING}" >"${WORK}/train-${n}.log" 2>&1 ||
    { tail -20 "${WORK}/train-${n}.log" >&2; exit 1; }
  end=$(date +%s)
  "${BIN}/ckptctl" list "${WORK}/run-${n}/checkpoints" --json >"${WORK}/ckpt-${n}.json"
  echo "   N=${n}: $((end - start)) s" >&2
done

python3 - "${WORK}" "${RANKS}" <<'PY'
import json, math, os, statistics, sys
work, ranks = sys.argv[1], [int(n) for n in sys.argv[2].split()]

def p95(xs):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, math.ceil(0.95 * len(xs)) - 1)]

GB = 1e9
rows = {}
for n in ranks:
    steps = [json.loads(l) for l in open(os.path.join(work, f"run-{n}", "metrics.jsonl"))]
    timed = [s for s in steps[1:]]
    compute = [s["step_time_s"] - s["ckpt_stall_s"] for s in timed]
    stalls = [s["ckpt_stall_s"] for s in steps if s["ckpt_stall_s"] > 0]
    ck = json.load(open(os.path.join(work, f"ckpt-{n}.json")))["checkpoints"]
    ck = [c for c in ck if c["status"] == "complete"]
    raw = statistics.median(c["raw_bytes"] for c in ck)
    disk = statistics.median(c["bytes_on_disk"] for c in ck)
    rows[n] = dict(
        step_med=statistics.median(compute), step_p95=p95(compute),
        data_med=statistics.median(s["data_wait_s"] for s in timed),
        data_p95=p95([s["data_wait_s"] for s in timed]),
        comm_med=statistics.median(s["comm_s"] for s in timed),
        comm_p95=p95([s["comm_s"] for s in timed]),
        stall=statistics.median(stalls) if stalls else 0.0, raw=raw, disk=disk,
        tok=statistics.median(s["tokens_per_s"] for s in timed), samples=len(timed))
print(f"{'N':>2}{'steps':>6}{'step_med':>9}{'step_p95':>9}{'data_med':>9}{'data_p95':>9}"
      f"{'comm_med':>9}{'comm_p95':>9}{'comm%':>6}{'tok/s':>8}{'E':>6}{'stall_s':>8}"
      f"{'state_GB':>9}{'disk_GB':>8}{'s/GB':>6}")
t1 = rows[ranks[0]]["step_med"] if ranks[0] == 1 else None
for n in ranks:
    r = rows[n]
    e = f"{t1 / r['step_med']:6.2f}" if t1 else f"{'-':>6}"
    print(f"{n:>2}{r['samples']:>6}{r['step_med']:9.3f}{r['step_p95']:9.3f}{r['data_med']:9.4f}"
          f"{r['data_p95']:9.4f}{r['comm_med']:9.3f}{r['comm_p95']:9.3f}"
          f"{100 * r['comm_med'] / r['step_med']:5.0f}%{r['tok']:8.0f}{e}{r['stall']:8.2f}"
          f"{r['raw'] / GB:9.3f}{r['disk'] / GB:8.3f}{r['stall'] / (r['raw'] / GB):6.2f}")
print("step: step_time_s - ckpt_stall_s of steps 2..S (rank 0); data/comm: data_wait_s, comm_s; "
      "E = T1/(N x TN) with TN = step_N / N (same work), i.e. step_1 / step_N; stall_s: median "
      "synchronous checkpoint stall; state_GB: uncompressed checkpoint bytes (all ranks); "
      "disk_GB: on disk (zstd); s/GB: stall per GB of state.")
PY
