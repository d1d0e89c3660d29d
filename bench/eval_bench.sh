#!/usr/bin/env bash
# Held-out evaluation cost ([eval], train/eval/eval_loop.h) against a training step (printed, never
# pass/fail): `ftrain train` of configs/small.cfg under `ftrain launch --nproc N` with
# eval.every_steps = EVERY and eval.batches = FORWARDS x N (each rank runs FORWARDS no-grad
# forwards of one micro-batch per evaluation), read back from metrics.jsonl: the median
# training step (steps without an evaluation, step 1 left out as warm-up; one micro-batch
# forward + backward per rank, activation checkpointing as in the config) against the median
# eval_s / FORWARDS, i.e. one held-out micro-batch on the same engine, dtype and ranks.
# usage: bench/eval_bench.sh   (after `ninja -C build ftrain`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_EVAL_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_EVAL_BENCH_SEQ_LEN:-128}"
MICRO_BATCH="${FTRAIN_EVAL_BENCH_MICRO_BATCH:-2}"
STEPS="${FTRAIN_EVAL_BENCH_STEPS:-9}"
EVERY="${FTRAIN_EVAL_BENCH_EVERY:-2}"
FORWARDS="${FTRAIN_EVAL_BENCH_FORWARDS:-4}"
RANKS="${FTRAIN_EVAL_BENCH_RANKS:-1 2}"
VOCAB="${FTRAIN_EVAL_BENCH_VOCAB:-2000}"  # <= model.vocab_size
WORK="$(mktemp -d /tmp/ftrain-eval-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== eval_bench: $(basename "${CONFIG}"), seq_len ${SEQ_LEN}, micro-batch ${MICRO_BATCH} per rank," \
  "${STEPS} steps, eval every ${EVERY} (${FORWARDS} forwards per rank), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${BIN}/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/data" /usr/share/common-licenses >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }
"${BIN}/ftrain" pack --tokenizer "${WORK}/data/tokenizer.model" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/heldout" /usr/share/common-licenses/MPL-2.0 >/dev/null \
  2>>"${WORK}/pack.log" || { cat "${WORK}/pack.log" >&2; exit 1; }

printf '%-6s %-14s %-16s %-18s %s\n' ranks "train step" "eval (total)" "eval per batch" "per batch / step"
for n in ${RANKS}; do
  "${BIN}/ftrain" launch --nproc "${n}" -- train --config "${CONFIG}" \
    --data.path="${WORK}/data" --run.dir="${WORK}/run-${n}" --train.steps="${STEPS}" \
    --train.micro_batch="${MICRO_BATCH}" --train.grad_accum=1 --train.warmup_steps=2 \
    --ckpt.every_steps=0 --ckpt.every_minutes=0 --ckpt.save_final=false --ckpt.daemon=off \
    --eval.path="${WORK}/heldout" --eval.every_steps="${EVERY}" \
    --eval.batches="$((FORWARDS * n))" >"${WORK}/run-${n}.log" 2>&1 ||
    { tail -n 20 "${WORK}/run-${n}.log" >&2; exit 1; }
  python3 - "${WORK}/run-${n}/metrics.jsonl" "${n}" "${FORWARDS}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n, forwards = int(sys.argv[2]), int(sys.argv[3])
steps = [r["step_time_s"] - r.get("eval_s", 0) for r in rows[1:] if "eval_s" not in r]
evals = [r["eval_s"] for r in rows if "eval_s" in r]
step, ev = statistics.median(steps), statistics.median(evals)
print(f"{n:<6d} {step:<14.3f} {ev:<16.3f} {ev / forwards:<18.3f} {ev / forwards / step:.2f}")
PY
done
