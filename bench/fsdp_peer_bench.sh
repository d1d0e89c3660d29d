#!/usr/bin/env bash
# ftrain's CPU training step against PyTorch FSDP2 (printed, never pass/fail): the same model
# config, ranks, sequence length, micro-batch, bf16 parameters and reduction, activation
# checkpointing, SDPA and one intra-op thread per rank, Gloo on both sides, run alternately in
# the same bench (ftrain, peer, ftrain, peer per sequence length). ftrain runs
# build/bin/fsdp_worker (the engine the trainer uses, synthetic tokens); the peer is
# bench/cpu_peer_fsdp2.py (transformers' LlamaForCausalLM under fully_shard, torch.optim.AdamW).
# Per side: the median step time after the first (warm-up) step, over both runs.
# usage: bench/fsdp_peer_bench.sh   (after `ninja -C build ftrain fsdp_worker`)
#   FTRAIN_PEER_BENCH_CONFIG (configs/small.cfg), _SEQ_LENS ("128 512 2048"), _RANKS (2),
#   _STEPS (3, one of them warm-up)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_PEER_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LENS="${FTRAIN_PEER_BENCH_SEQ_LENS:-128 512 2048}"
RANKS="${FTRAIN_PEER_BENCH_RANKS:-2}"
STEPS="${FTRAIN_PEER_BENCH_STEPS:-3}"
PEER_PYTHONPATH="$(sed -n 's/^FTRAIN_HF_PYTHONPATH:STRING=//p' "${ROOT}/build/CMakeCache.txt")"
WORK="$(mktemp -d /tmp/ftrain-fsdp-peer-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== fsdp_peer_bench: $(basename "${CONFIG}"), ${RANKS} ranks full_shard, micro-batch 1," \
  "bf16/bf16, act-ckpt, ${STEPS} steps (1 warm-up), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

ftrain_run() {  # SEQ OUT
  "${BIN}/ftrain" launch --nproc "${RANKS}" --nodes 1 -- "${BIN}/fsdp_worker" --out "$2" \
    --config "${CONFIG}" --sharding full_shard --steps "${STEPS}" --micro-batch 1 \
    --seq-len "$1" --dtype bfloat16 --reduce-dtype bfloat16 --act-ckpt 1 --bin 0 \
    2>"$2.log" || { tail -20 "$2.log" >&2; exit 1; }
}

peer_run() {  # SEQ OUT
  PYTHONPATH="${PEER_PYTHONPATH}" python3 "${ROOT}/bench/cpu_peer_fsdp2.py" --config "${CONFIG}" \
    --nproc "${RANKS}" --seq "$1" --steps "${STEPS}" >"$2.json" 2>"$2.log" ||
    { tail -20 "$2.log" >&2; exit 1; }
}

for seq in ${SEQ_LENS}; do
  for round in 1 2; do
    ftrain_run "${seq}" "${WORK}/ftrain-${seq}-${round}"
    peer_run "${seq}" "${WORK}/peer-${seq}-${round}"
    echo "   seq ${seq} round ${round} done" >&2
  done
done

python3 - "${WORK}" "${SEQ_LENS}" <<'PY'
import json, os, statistics, sys
work, seqs = sys.argv[1], sys.argv[2].split()
def times(name):
    out = []
    for r in (1, 2):
        out += json.load(open(os.path.join(work, f"{name}-{r}.json")))["step_time_s"][1:]
    return out
print(f"{'seq':>6}{'ftrain_s':>10}{'fsdp2_s':>10}{'ftrain/fsdp2':>14}")
for s in seqs:
    f, p = statistics.median(times(f"ftrain-{s}")), statistics.median(times(f"peer-{s}"))
    print(f"{s:>6}{f:10.3f}{p:10.3f}{f / p:14.2f}")
print("ftrain/fsdp2 < 1: ftrain's step is faster")
PY
