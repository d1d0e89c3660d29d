#!/usr/bin/env bash
# Memory while a rank takes its initial weights from a Hugging Face directory (printed, never
# pass/fail). A generated ~1.1B-parameter Llama (TinyLlama's shapes: vocab 32000, hidden 2048,
# 22 layers, 32 heads, 4 KV heads, MLP 5632, untied) saved as 2 bf16 safetensors shards with
# model.safetensors.index.json, loaded by each rank of a 4-rank full_shard world, one rank at a
# time (build/bin/load_bench: the rank's real engine with a stand-in shard group; building and
# loading never communicate). Per rank: peak RSS (VmHWM) against its FSDP state (fp32 master,
# two AdamW moments, gradient shard) plus one unit, and bytes read from the files.
#   sharded  this build's path (train/base_model.cc): every rank reads only its own slices
#   full     the path before: the whole fp32 model on every rank, then sharded
# BEFORE_BIN_DIR: a load_bench built on the unchanged tree with -DFTRAIN_LOAD_BENCH_FULL_ONLY
# (the "before" numbers then come from that build; else from this build's --mode full, which
# runs the same, unchanged functions). The model (~2.2 GB) lives in a temp dir, removed at exit.
# usage: bench/load_bench.sh [BEFORE_BIN_DIR]   (after `ninja -C build load_bench`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
BEFORE_BIN="${1:-${BIN}}"
HF_PYTHONPATH="${FTRAIN_HF_PYTHONPATH:-/opt/ftrain/py-transformers-5.17.0:/opt/ftrain/torch-2.11.0}"
WORLD=4
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-load-bench-XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

cat >"${WORK}/model.cfg" <<'EOF'
[model]
vocab_size = 32000
hidden_size = 2048
intermediate_size = 5632
num_layers = 22
num_heads = 32
num_kv_heads = 4
max_seq_len = 2048
tie_embeddings = false
EOF

echo "== load_bench: generating the bf16 model in ${WORK}/model" >&2
PYTHONPATH="${HF_PYTHONPATH}" /usr/bin/python3 - "${WORK}/model" <<'EOF'
import json, os, sys
import torch
from safetensors.torch import save_file
out = sys.argv[1]
os.makedirs(out)
V, H, I, L, KV = 32000, 2048, 5632, 22, 4 * 64
shapes = [("model.embed_tokens.weight", (V, H))]
for i in range(L):
    p = "model.layers.%d." % i
    shapes += [(p + "self_attn.q_proj.weight", (H, H)), (p + "self_attn.k_proj.weight", (KV, H)),
               (p + "self_attn.v_proj.weight", (KV, H)), (p + "self_attn.o_proj.weight", (H, H)),
               (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
               (p + "mlp.down_proj.weight", (H, I)), (p + "input_layernorm.weight", (H,)),
               (p + "post_attention_layernorm.weight", (H,))]
shapes += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
total = sum(torch.Size(s).numel() for _, s in shapes)
g = torch.Generator().manual_seed(0)
weight_map, shard, done, n = {}, {}, 0, 1
for name, shape in shapes:
    if done >= total // 2 and n == 1 and shard:
        save_file(shard, os.path.join(out, "model-00001-of-00002.safetensors"), {"format": "pt"})
        shard, n = {}, 2
    shard[name] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
    weight_map[name] = "model-%05d-of-00002.safetensors" % n
    done += torch.Size(shape).numel()
save_file(shard, os.path.join(out, "model-00002-of-00002.safetensors"), {"format": "pt"})
json.dump({"metadata": {"total_size": 2 * total}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"))
print("%d parameters" % total, file=sys.stderr)
EOF
du -sh "${WORK}/model" >&2

run() {  # run BIN MODE
  local rank
  for ((rank = 0; rank < WORLD; rank++)); do
    "$1/load_bench" --config "${WORK}/model.cfg" --weights "${WORK}/model/model.safetensors.index.json" \
      --rank "${rank}" --world "${WORLD}" --mode "$2"
  done
}
{
  echo "before"
  run "${BEFORE_BIN}" full
  echo "after"
  run "${BIN}" sharded
} | tee "${WORK}/results" >&2
echo
/usr/bin/python3 - "${WORK}/results" <<'EOF'
import json, sys
gb = lambda b: "%.2f" % (b / 1e9)
print("| path | rank | peak RSS GB | FSDP state GB | state + one unit GB | read from files GB | s |")
print("|---|---|---|---|---|---|---|")
label = ""
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        label = line.strip()
        continue
    j = json.loads(line)
    print("| %s | %d | %s | %s | %s | %s | %.0f |" % (
        label, j["rank"], gb(j["peak_rss_bytes"]), gb(j["fsdp_state_bytes"]),
        gb(j["fsdp_state_bytes"] + j["largest_unit_fp32_bytes"]), gb(j["bytes_read"]),
        j["seconds"]))
EOF
