#!/usr/bin/env bash
# Memory per rank against `ftrain plan`, measured in the same run (printed, never pass/fail):
# a ~0.56B-parameter Llama shape (hidden 1280, 24 layers, vocab 32000) on 4 local ranks,
# full_shard, bf16 compute and reduction, fp32 master + AdamW, activation checkpointing,
# grad_accum 4 (the accumulation path holds the most gradient memory). For every rank:
#   - model_MB: peak RSS during the steps minus the RSS before the model was built (what the
#     libraries and Gloo hold before any tensor is not the plan's business);
#   - plan_MB: `ftrain plan --json`'s full_shard row summed (state, gathered units, gradient
#     buffers, head + loss, activations) for the same shape, seq_len and micro-batch;
#   - the ratio model/plan (goal <= 1.1), and the engine's own account of each category
#     (FsdpEngine::Memory) next to the plan's, so a gap names its category.
# usage: bench/fsdp_memory_bench.sh   (after `ninja -C build ftrain fsdp_worker`)
#   FTRAIN_MEM_BENCH_SEQ_LEN (default 64), FTRAIN_MEM_BENCH_ACCUM (4), FTRAIN_MEM_BENCH_RANKS (4)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
SEQ_LEN="${FTRAIN_MEM_BENCH_SEQ_LEN:-64}"
ACCUM="${FTRAIN_MEM_BENCH_ACCUM:-4}"
RANKS="${FTRAIN_MEM_BENCH_RANKS:-4}"
WORK="$(mktemp -d /tmp/ftrain-fsdp-mem-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

cat >"${WORK}/model.cfg" <<'CFG'
[model]
vocab_size = 32000
hidden_size = 1280
intermediate_size = 3456
num_layers = 24
num_heads = 20
num_kv_heads = 20
max_seq_len = 2048
tie_embeddings = false
CFG

echo "== fsdp_memory_bench: 0.56B shape, ${RANKS} ranks full_shard, seq_len ${SEQ_LEN}," \
  "micro-batch 1, grad_accum ${ACCUM}, bf16/bf16, act-ckpt, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"${BIN}/ftrain" plan --model "${WORK}/model.cfg" --nodes 1 --gpus-per-node "${RANKS}" \
  --seq-len "${SEQ_LEN}" --micro-batch 1 --act-ckpt --reduce-dtype bf16 --json \
  >"${WORK}/plan.json"
start=$(date +%s)
"${BIN}/ftrain" launch --nproc "${RANKS}" --nodes 1 -- "${BIN}/fsdp_worker" \
  --out "${WORK}/run" --config "${WORK}/model.cfg" --sharding full_shard --steps 2 \
  --micro-batch 1 --seq-len "${SEQ_LEN}" --accum "${ACCUM}" --dtype bfloat16 \
  --reduce-dtype bfloat16 --act-ckpt 1 --init sharded --bin 0 2>"${WORK}/run.log" ||
  { tail -20 "${WORK}/run.log" >&2; exit 1; }
echo "   run: $(($(date +%s) - start)) s" >&2

python3 - "${WORK}" <<'PY'
import json, os, sys
work = sys.argv[1]
plan = json.load(open(os.path.join(work, "plan.json")))
row = next(s for s in plan["strategies"] if s["name"] == "full_shard")
run = json.load(open(os.path.join(work, "run.json")))
MB = 1e6
cats = ["weights_bytes", "grads_bytes", "master_bytes", "moments_bytes", "gathered_bytes",
        "grad_buffer_bytes", "loss_bytes", "activation_bytes"]
planned = sum(row[c] for c in cats)
print(f"parameters {run['params'] / 1e9:.3f} B; plan full_shard total {planned / MB:.0f} MB per rank")
print(f"{'rank':>4}{'model_MB':>10}{'plan_MB':>9}{'ratio':>7}{'rss_MB':>8}{'base_MB':>9}")
worst = 0
for r, peak in enumerate(run["peak_rss_steps_bytes"]):
    base = run["rss_before_model_bytes"][r]
    model = peak - base
    worst = max(worst, model / planned)
    print(f"{r:>4}{model / MB:10.0f}{planned / MB:9.0f}{model / planned:7.2f}"
          f"{peak / MB:8.0f}{base / MB:9.0f}")
print(f"worst rank: {worst:.2f}x the plan (goal <= 1.10)")
print(f"{'category':>18}{'engine_MB':>10}{'plan_MB':>9}   (rank 0; engine = FsdpEngine::Memory)")
for c in cats:
    e = run["memory"].get(c)
    print(f"{c[:-6]:>18}{'-' if e is None else f'{e / MB:.0f}':>10}{row[c] / MB:9.0f}")
PY
