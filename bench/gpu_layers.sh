#!/usr/bin/env bash
# gpu_layers.sh - the training step at the seed's shapes on one GPU (numbers, never pass/fail):
# configs/gpu-7b-layers.cfg (Llama-2-7B layers: hidden 4096, 32 heads, MLP 11008, 4096-token
# rows, bf16 compute, fp32 master/AdamW/reduction; 4 layers) trained by ftrain, with and
# without activation checkpointing, and the same shapes and batch through the PyTorch FSDP2 +
# transformers peer (bench/gpu_peer_fsdp2.py) in the same run. Per variant: the median step
# (steps after the warm-up), tokens/s, MFU as 6N and as torchtitan counts it (6 x non-embedding
# params + 12 x layers x heads x head_dim x seq), the allocator's peak allocated / reserved
# GiB and its free-and-retry count; ftrain's peak against `ftrain plan`'s per-GPU figure for
# the same config; the peer's tokens/s over ftrain's.
# usage: bench/gpu_layers.sh DATA_DIR OUT_DIR
#   DATA_DIR  packed rows of >= 4097 tokens (ftrain pack --seq-len 4096), token ids < 32000
#   FTRAIN_BIN_DIR (default build/bin), FTRAIN_PEAK_TFLOPS (default 989, H100/H200 bf16 dense),
#   FTRAIN_GPU_LAYERS_VARIANTS (default "ac noac peer-ac peer-noac peer-ac-det"),
#   FTRAIN_GPU_LAYERS_ARGS (extra --section.key=value for the ftrain runs).
# Exit 0 done (a variant that failed is printed as such), 2 usage, 77 no GPU.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${ROOT}/configs/gpu-7b-layers.cfg"
PEAK_TFLOPS="${FTRAIN_PEAK_TFLOPS:-989}"
VARIANTS="${FTRAIN_GPU_LAYERS_VARIANTS:-ac noac peer-ac peer-noac peer-ac-det}"
read -r -a EXTRA <<<"${FTRAIN_GPU_LAYERS_ARGS:-}"
(($# == 2)) || { echo "usage: $0 DATA_DIR OUT_DIR" >&2; exit 2; }
DATA="$1" OUT="$2"
mkdir -p "${OUT}"
command -v nvidia-smi >/dev/null 2>&1 || { echo "gpu_layers: no GPU (skipped)" >&2; exit 77; }
log() { echo "== gpu_layers: $*" >&2; }

# The shapes, read back from the config for the peer and the FLOP count.
get() { sed -nE "s/^$1 *= *([0-9]+).*/\1/p" "${CONFIG}" | head -n 1; }
H=$(get hidden_size) I=$(get intermediate_size) L=$(get num_layers) NH=$(get num_heads)
NKV=$(get num_kv_heads) V=$(get vocab_size) T=$(get max_seq_len) MB=$(get micro_batch)
K=$(get grad_accum) STEPS=$(get steps)
MODEL_OVERRIDES=()
for kv in "${EXTRA[@]}"; do  # overrides of the shapes the peer and the plan must see too
  case "${kv}" in
    --model.num_layers=*) L="${kv#*=}" ;; --model.hidden_size=*) H="${kv#*=}" ;;
    --model.intermediate_size=*) I="${kv#*=}" ;; --model.num_heads=*) NH="${kv#*=}" ;;
    --model.num_kv_heads=*) NKV="${kv#*=}" ;; --model.vocab_size=*) V="${kv#*=}" ;;
    --model.max_seq_len=*) T="${kv#*=}" ;; --train.micro_batch=*) MB="${kv#*=}" ;;
    --train.grad_accum=*) K="${kv#*=}" ;; --train.steps=*) STEPS="${kv#*=}" ;;
  esac
  [[ "${kv}" != --model.* ]] || MODEL_OVERRIDES+=("${kv}")
done

# `ftrain plan`'s per-GPU total for full_shard on one GPU, this config, activation
# checkpointing on (1) or off (0): what the allocator's peak is held against.
plan_gib() {
  local ac=()
  (($1)) && ac=(--act-ckpt)
  "${BIN}/ftrain" plan --model "${CONFIG}" --nodes 1 --gpus-per-node 1 --gpu-mem-gb 141 \
    --micro-batch "${MB}" "${ac[@]}" --json "${MODEL_OVERRIDES[@]}" 2>/dev/null | python3 -c '
import json, sys
s = {x["name"]: x for x in json.load(sys.stdin)["strategies"]}["full_shard"]
print(round(s["total_bytes_per_gpu"] / 2**30, 3))' 2>/dev/null || echo 0
}

ftrain_variant() {  # NAME AC ARGS...: one ftrain run, its summary row as JSON on stdout
  local name="$1" run="${OUT}/${1}" plan
  plan="$(plan_gib "$2")"
  shift 2
  rm -rf "${run}"
  if ! timeout 300 "${BIN}/ftrain" train --config "${CONFIG}" --data.path="${DATA}" \
    --run.dir="${run}" --metrics.tensorboard=false --metrics.peak_tflops="${PEAK_TFLOPS}" \
    "${EXTRA[@]}" "$@" >"${run}.log" 2>&1; then
    echo "{\"variant\":\"${name}\",\"failed\":\"$(tail -n 3 "${run}.log" | tr '\n"' ' _')\"}"
    return 0
  fi
  python3 - "${run}/metrics.jsonl" "${run}.log" "${name}" "${L}" "${NH}" "$((H / NH))" "${T}" \
    "${V}" "${H}" "${PEAK_TFLOPS}" "${plan}" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
name, L, nh, hd, T, V, H, peak = sys.argv[3], *map(int, sys.argv[4:10]), float(sys.argv[10])
plan = float(sys.argv[11])
params = int(re.search(r"train: (\d+) parameters", log).group(1))
steady = rows[2:] or rows
tps = statistics.median(r["tokens_per_s"] for r in steady)
tt = 6 * (params - V * H) + 12 * L * nh * hd * T
med = lambda k: statistics.median(r[k] for r in steady if k in r) if any(k in r for r in steady) else None
att = re.search(r"attention: scaled_dot_product_attention, (.*)", log)
print(json.dumps({"variant": name, "params": params,
    "step_s": round(statistics.median(r["step_time_s"] for r in steady), 5),
    "tokens_per_s": round(tps, 1), "mfu_6n": round(6 * params * tps / (peak * 1e12), 4),
    "mfu_torchtitan": round(tt * tps / (peak * 1e12), 4),
    "alloc_peak_gib": med("gpu_alloc_peak_gb"), "reserved_peak_gib": med("gpu_reserved_peak_gb"),
    "alloc_retries": max((r.get("gpu_alloc_retries", 0) for r in rows), default=None),
    "nvml_gib": med("gpu_mem_gb"), "gpu_util": med("gpu_util"),
    "phases": {k: round(statistics.median(r["phases"]["median"][k] for r in steady), 4)
               for k in ("data_wait_s", "compute_s", "comm_wait_s", "optimizer_s", "other_s")}
              if all("phases" in r for r in steady) else None,
    "plan_gib": plan or None, "attention": att.group(1) if att else None}))
PY
}

peer_variant() {  # NAME ARGS...: the FSDP2 peer, its JSON line on stdout
  local name="$1"
  shift
  if ! timeout 300 env -u LD_LIBRARY_PATH python3 "${ROOT}/bench/gpu_peer_fsdp2.py" --hidden "${H}" --intermediate "${I}" \
    --layers "${L}" --heads "${NH}" --kv-heads "${NKV}" --vocab "${V}" --seq "${T}" \
    --micro-batch "${MB}" --grad-accum "${K}" --steps "$((STEPS - 2))" --warmup 2 \
    --peak-tflops "${PEAK_TFLOPS}" "$@" >"${OUT}/${name}.json" 2>"${OUT}/${name}.log"; then
    echo "{\"variant\":\"${name}\",\"failed\":\"$(tail -n 3 "${OUT}/${name}.log" | tr '\n"' ' _')\"}"
    return 0
  fi
  python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d["variant"]=sys.argv[2]; print(json.dumps(d))' \
    "${OUT}/${name}.json" "${name}"
}

log "L=${L} H=${H} heads=${NH}/${NKV} T=${T} micro-batch ${MB} x ${K}, ${STEPS} steps"
: >"${OUT}/rows.jsonl"
for v in ${VARIANTS}; do
  log "variant ${v}"
  case "${v}" in
    ac) ftrain_variant ac 1 --train.activation_checkpointing=true ;;
    noac) ftrain_variant noac 0 --train.activation_checkpointing=false ;;
    peer-ac) peer_variant peer-ac --act-ckpt 1 ;;
    peer-noac) peer_variant peer-noac --act-ckpt 0 ;;
    peer-ac-det) peer_variant peer-ac-det --act-ckpt 1 --deterministic 1 ;;
    *) log "unknown variant ${v}"; exit 2 ;;
  esac >>"${OUT}/rows.jsonl"
  tail -n 1 "${OUT}/rows.jsonl" >&2
done
python3 - "${OUT}/rows.jsonl" <<'PY'
import json, sys
rows = {r["variant"]: r for r in map(json.loads, open(sys.argv[1]))}
print(f"{'variant':<12} {'step s':>8} {'tok/s':>9} {'MFU 6N':>7} {'MFU tt':>7} {'alloc GiB':>9} "
      f"{'resv GiB':>9} {'retries':>7} {'/plan':>6}")
for name, r in rows.items():
    if "failed" in r:
        print(f"{name:<12} FAILED: {r['failed'][:100]}")
        continue
    plan = r.get("plan_gib")
    ratio = f"{r['alloc_peak_gib'] / plan:.2f}" if plan and r.get("alloc_peak_gib") else "-"
    print(f"{name:<12} {r['step_s']:>8.4f} {r['tokens_per_s']:>9.0f} {r['mfu_6n']:>7.3f} "
          f"{r['mfu_torchtitan']:>7.3f} {r.get('alloc_peak_gib') or 0:>9.2f} "
          f"{r.get('reserved_peak_gib') or 0:>9.2f} {r.get('alloc_retries') or 0:>7} {ratio:>6}")
for a, b in (("ac", "peer-ac"), ("noac", "peer-noac")):
    if a in rows and b in rows and "failed" not in rows[a] and "failed" not in rows[b]:
        print(f"ftrain {a} / peer {b}: tokens/s ratio {rows[a]['tokens_per_s'] / rows[b]['tokens_per_s']:.2f}")
PY
