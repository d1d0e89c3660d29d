#!/usr/bin/env bash
# What selective activation checkpointing (train.ac_every) costs and saves on CPU (printed, never
# pass/fail): the same model, ranks and batch with every layer recomputed, every second and every
# fourth layer (ac_every = 2, 4), and none; each mode run twice, alternating. Per mode: the
# median step time after the first (warm-up) step, the step's allocator peak
# (`fsdp_worker --track-alloc 1`, tests/counting_allocator.h) and `ftrain plan`'s total for the
# same mode, and both against no recomputation.
# usage: bench/ac_every_bench.sh   (after `ninja -C build ftrain fsdp_worker`; ~4 min)
#   FTRAIN_AC_BENCH_CONFIG (configs/small.cfg), _SEQ_LEN (512), _RANKS (2), _STEPS (3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_AC_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_AC_BENCH_SEQ_LEN:-512}"
RANKS="${FTRAIN_AC_BENCH_RANKS:-2}"
STEPS="${FTRAIN_AC_BENCH_STEPS:-3}"
WORK="$(mktemp -d /tmp/ftrain-ac-every-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== ac_every_bench: $(basename "${CONFIG}"), ${RANKS} ranks full_shard, seq_len ${SEQ_LEN}," \
  "micro-batch 1, bf16/bf16, ${STEPS} steps (1 warm-up), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

declare -A PLAN_FLAGS=([1]="--act-ckpt" [2]="--act-ckpt --ac-every 2"
  [4]="--act-ckpt --ac-every 4" [none]="")
declare -A WORKER_FLAGS=([1]="--act-ckpt 1" [2]="--act-ckpt 1 --ac-every 2"
  [4]="--act-ckpt 1 --ac-every 4" [none]="--act-ckpt 0")
MODES=(1 2 4 none)
for mode in "${MODES[@]}"; do
  # shellcheck disable=SC2086  # the flags are words
  "${BIN}/ftrain" plan --model "${CONFIG}" --nodes 1 --gpus-per-node "${RANKS}" \
    --seq-len "${SEQ_LEN}" --micro-batch 1 --reduce-dtype bf16 --json ${PLAN_FLAGS[${mode}]} \
    >"${WORK}/${mode}.plan.json"
done
for round in 1 2; do
  for mode in "${MODES[@]}"; do
    # shellcheck disable=SC2086
    "${BIN}/ftrain" launch --nproc "${RANKS}" --nodes 1 -- "${BIN}/fsdp_worker" \
      --out "${WORK}/${mode}-${round}" --config "${CONFIG}" --sharding full_shard \
      --steps "${STEPS}" --micro-batch 1 --seq-len "${SEQ_LEN}" --dtype bfloat16 \
      --reduce-dtype bfloat16 --bin 0 --track-alloc 1 ${WORKER_FLAGS[${mode}]} \
      2>"${WORK}/${mode}-${round}.log" || { tail -20 "${WORK}/${mode}-${round}.log" >&2; exit 1; }
  done
done

python3 - "${WORK}" <<'PY'
import json, os, statistics, sys
work = sys.argv[1]
rows = {}
for mode in ("1", "2", "4", "none"):
    times, peak = [], 0
    for rnd in (1, 2):
        run = json.load(open(os.path.join(work, f"{mode}-{rnd}.json")))
        times += run["step_time_s"][1:]
        peak = max(peak, max(run["alloc_peak_steps_bytes"]))
    plan = json.load(open(os.path.join(work, f"{mode}.plan.json")))
    row = next(s for s in plan["strategies"] if s["name"] == "full_shard")
    rows[mode] = (statistics.median(times), peak, row["total_bytes_per_gpu"])
t0, p0, _ = rows["none"]
print(f"{'recompute':<14} {'step s':>7} {'/ none':>7} {'peak MB':>8} {'/ none':>7} {'plan MB':>8}"
      f" {'peak/plan':>9}")
names = {"1": "every layer", "2": "ac_every = 2", "4": "ac_every = 4", "none": "none"}
for mode, (t, peak, plan) in rows.items():
    print(f"{names[mode]:<14} {t:>7.3f} {t / t0:>7.3f} {peak / 1e6:>8.1f} {peak / p0:>7.3f}"
          f" {plan / 1e6:>8.1f} {peak / plan:>9.3f}")
PY
