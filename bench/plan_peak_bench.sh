#!/usr/bin/env bash
# The step's allocator peak against `ftrain plan`, per recompute mode and layer count (printed,
# never pass/fail). On a GPU gpu-check holds the CUDA allocator's peak against the plan; here
# tests/counting_allocator.h counts every CPU tensor storage (`fsdp_worker --track-alloc 1`).
# A Llama of hidden 512, MLP 1376, 8 heads, vocab 4096, 2, 4 and 6 layers; 2 local ranks,
# full_shard, bf16 compute and reduction, seq_len 512, micro-batch 2, grad_accum 2; activation
# checkpointing of every layer, of every second layer (train.ac_every = 2), and none. For each
# run: the peak (steps 2..), the plan's total per GPU for the same shape and mode, their ratio,
# and where the peak was (the innermost profiler range). Then per mode the growth per layer,
# measured and planned: the per-layer activation formula shows there, free of fixed terms.
# usage: bench/plan_peak_bench.sh   (after `ninja -C build ftrain fsdp_worker`; ~1.5 min)
#   FTRAIN_PEAK_BENCH_SEQ_LEN (default 512), FTRAIN_PEAK_BENCH_KV_HEADS (8)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
SEQ_LEN="${FTRAIN_PEAK_BENCH_SEQ_LEN:-512}"
KV_HEADS="${FTRAIN_PEAK_BENCH_KV_HEADS:-8}"
WORK="$(mktemp -d /tmp/ftrain-plan-peak-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== plan_peak_bench: hidden 512, 2 ranks full_shard, seq_len ${SEQ_LEN}, micro-batch 2," \
  "grad_accum 2, bf16/bf16, kv heads ${KV_HEADS}, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

declare -A PLAN_FLAGS=([all]="--act-ckpt" [every2]="--act-ckpt --ac-every 2" [none]="")
declare -A WORKER_FLAGS=([all]="--act-ckpt 1" [every2]="--act-ckpt 1 --ac-every 2"
  [none]="--act-ckpt 0")
for layers in 2 4 6; do
  cat >"${WORK}/l${layers}.cfg" <<CFG
[model]
vocab_size = 4096
hidden_size = 512
intermediate_size = 1376
num_layers = ${layers}
num_heads = 8
num_kv_heads = ${KV_HEADS}
max_seq_len = ${SEQ_LEN}
tie_embeddings = false
CFG
  for mode in all every2 none; do
    name="${mode}-${layers}"
    # shellcheck disable=SC2086  # the flags are words
    "${BIN}/ftrain" plan --model "${WORK}/l${layers}.cfg" --nodes 1 --gpus-per-node 2 \
      --seq-len "${SEQ_LEN}" --micro-batch 2 --reduce-dtype bf16 --json ${PLAN_FLAGS[${mode}]} \
      >"${WORK}/${name}.plan.json"
    # shellcheck disable=SC2086
    "${BIN}/ftrain" launch --nproc 2 --nodes 1 -- "${BIN}/fsdp_worker" \
      --out "${WORK}/${name}" --config "${WORK}/l${layers}.cfg" --sharding full_shard \
      --steps 3 --micro-batch 2 --seq-len "${SEQ_LEN}" --accum 2 --dtype bfloat16 \
      --reduce-dtype bfloat16 --init sharded --bin 0 --track-alloc 1 ${WORKER_FLAGS[${mode}]} \
      2>"${WORK}/${name}.log" || { tail -20 "${WORK}/${name}.log" >&2; exit 1; }
  done
done

python3 - "${WORK}" <<'PY'
import json, os, sys
work = sys.argv[1]
MB = 1e6
print(f"{'mode':<8} {'layers':>6} {'peak MB':>9} {'plan MB':>9} {'peak/plan':>9}  peak in")
rows = {}
for mode in ("all", "every2", "none"):
    for layers in (2, 4, 6):
        name = f"{mode}-{layers}"
        plan = json.load(open(os.path.join(work, name + ".plan.json")))
        row = next(s for s in plan["strategies"] if s["name"] == "full_shard")
        run = json.load(open(os.path.join(work, name + ".json")))
        peak = max(run["alloc_peak_steps_bytes"])
        rows[(mode, layers)] = (peak, row["total_bytes_per_gpu"])
        print(f"{mode:<8} {layers:>6} {peak / MB:>9.2f} {row['total_bytes_per_gpu'] / MB:>9.2f}"
              f" {peak / row['total_bytes_per_gpu']:>9.3f}  {run['alloc_peak_where']}")
print(f"\n{'mode':<8} {'MB per layer: peak':>18} {'plan':>8} {'peak/plan':>9}")
for mode in ("all", "every2", "none"):
    (p2, q2), (p6, q6) = rows[(mode, 2)], rows[(mode, 6)]
    print(f"{mode:<8} {(p6 - p2) / 4 / MB:>18.2f} {(q6 - q2) / 4 / MB:>8.2f}"
          f" {(p6 - p2) / (q6 - q2):>9.3f}")
PY
