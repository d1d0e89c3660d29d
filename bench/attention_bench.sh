#!/usr/bin/env bash
# Attention numbers (printed, never pass/fail): one CPU rank trains configs/small.cfg on
# 2048-token rows for a few steps with each given build, and the script prints the median
# step time (first step excluded: warm-up) and the trainer's peak RSS (/usr/bin/time, the
# largest process of the run). Give the build before a change and the build after it to
# compare them (e.g. the eager [T, T] attention against scaled_dot_product_attention).
# usage: bench/attention_bench.sh [BIN_DIR ...]   (default: build/bin)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="${FTRAIN_ATTN_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_ATTN_BENCH_SEQ_LEN:-2048}"
STEPS="${FTRAIN_ATTN_BENCH_STEPS:-4}"
THREADS="${FTRAIN_ATTN_BENCH_THREADS:-2}"
DTYPE="${FTRAIN_ATTN_BENCH_DTYPE:-float32}"
ACT_CKPT="${FTRAIN_ATTN_BENCH_ACT_CKPT:-true}"
VOCAB=2000  # <= model.vocab_size
CORPUS=/usr/share/common-licenses
WORK="$(mktemp -d /tmp/ftrain-attn-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT
if [[ $# -eq 0 ]]; then set -- "${ROOT}/build/bin"; fi

echo "== attention_bench: $(basename "${CONFIG}"), seq_len ${SEQ_LEN}, micro-batch 1," \
  "${STEPS} steps, ${THREADS} threads, ${DTYPE}, activation checkpointing ${ACT_CKPT}," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$1/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/data" "${CORPUS}" >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }

i=0
for bin in "$@"; do
  i=$((i + 1))
  run="${WORK}/run-${i}"
  /usr/bin/time -f '%M' -o "${WORK}/rss-${i}" "${bin}/ftrain" launch --nproc 1 -- train \
    --config "${CONFIG}" --data.path="${WORK}/data" --run.dir="${run}" \
    --train.steps="${STEPS}" --train.micro_batch=1 --train.grad_accum=1 \
    --train.warmup_steps=1 --train.threads="${THREADS}" --train.param_dtype="${DTYPE}" \
    --train.activation_checkpointing="${ACT_CKPT}" --ckpt.save_final=false \
    --ckpt.every_minutes=0 >"${WORK}/train-${i}.log" 2>&1 ||
    { tail -20 "${WORK}/train-${i}.log" >&2; exit 1; }
  attention="$(grep -o 'attention: .*' "${WORK}/train-${i}.log" | head -1 || true)"
  python3 - "${run}/metrics.jsonl" "$(cat "${WORK}/rss-${i}")" "${bin}" "${attention}" <<'PY'
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
times = [s["step_time_s"] for s in steps[1:]]
print(f"{sys.argv[3]}: step {statistics.median(times):.2f} s (median of {len(times)}), "
      f"peak RSS {int(sys.argv[2]) / 1024 / 1024:.2f} GiB, loss {steps[-1]['loss']:.4f}; "
      f"{sys.argv[4] or 'attention: eager (no attention line in the log)'}")
PY
done
