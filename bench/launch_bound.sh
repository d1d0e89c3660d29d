#!/usr/bin/env bash
# Micro-batch / kernel-launch bound, measured (printed, never pass/fail): the same config
# trains at its model size, at half the width (hidden and intermediate size, query and key/value
# heads halved: the same kernels, each with a quarter of the work per layer) and at twice the
# micro-batch (the same kernels, twice the work each), and the script prints the median step
# time of each with its forward+backward compute and optimizer phases (metrics.jsonl "phases",
# the median rank; the first fifth of the steps left out: warm-up) and two ratios of the
# forward+backward time (where the kernels are launched; the optimizer scales with the
# parameters, not the tokens):
#   - half width / full: against the ratio of their FLOPs per token (6 x the parameters that
#     multiply, the embedding lookup excluded, + attention scores). A step that falls with the
#     FLOPs is compute-bound; one that does not fall ~2x when the model halves is
#     launch/overhead-bound (kernel launches, framework overhead, synchronisation: the work
#     does not fill the device). Halving the layers would not tell: it halves the launches too.
#   - per-sample time at 2x micro-batch / 1x: ~1 when compute-bound, well under 1 when a fixed
#     per-step cost dominates that a larger train.micro_batch amortises.
# usage: bench/launch_bound.sh [CONFIG]   (default configs/small.cfg; BIN_DIR from FTRAIN_BIN_DIR)
# FTRAIN_LAUNCH_BOUND_{RANKS (1),STEPS (10),SEQ_LEN (128),MICRO_BATCH (1),VOCAB (2000),ARGS}
# and ROUNDS (2): the three runs alternate that many times and their steps are pooled, so a
# change in the machine's load falls on all three alike.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONFIG="${1:-${BENCH_ROOT}/configs/small.cfg}"
RANKS="${FTRAIN_LAUNCH_BOUND_RANKS:-1}"
STEPS="${FTRAIN_LAUNCH_BOUND_STEPS:-10}"
SEQ_LEN="${FTRAIN_LAUNCH_BOUND_SEQ_LEN:-128}"
MB="${FTRAIN_LAUNCH_BOUND_MICRO_BATCH:-1}"
VOCAB="${FTRAIN_LAUNCH_BOUND_VOCAB:-2000}"  # <= model.vocab_size
ROUNDS="${FTRAIN_LAUNCH_BOUND_ROUNDS:-2}"
EXTRA="${FTRAIN_LAUNCH_BOUND_ARGS:-}"
model_key() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "${CONFIG}" | head -1; }
H="$(model_key hidden_size)" I="$(model_key intermediate_size)"
HEADS="$(model_key num_heads)" KV="$(model_key num_kv_heads)"
KV="${KV:-${HEADS}}"
HALF_KV=$((KV > 1 ? KV / 2 : 1))
if [[ -z "${H}" || -z "${I}" || -z "${HEADS}" ]] || ((HEADS % 2 || (HEADS / 2) % HALF_KV)); then
  echo "launch_bound.sh: ${CONFIG}: needs model.hidden_size, intermediate_size and an even" \
    "num_heads that num_kv_heads / 2 divides, to halve the width" >&2
  exit 2
fi
HALF="--model.hidden_size=$((H / 2)) --model.intermediate_size=$((I / 2))"
HALF+=" --model.num_heads=$((HEADS / 2)) --model.num_kv_heads=${HALF_KV}"
bench_workdir launch-bound

echo "== launch_bound: $(basename "${CONFIG}"), ${RANKS} rank(s), seq ${SEQ_LEN}, micro-batch" \
  "${MB}, ${STEPS} steps, hidden ${H} -> $((H / 2)), $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
bench_pack "${VOCAB}" "${SEQ_LEN}"
for ((round = 1; round <= ROUNDS; round++)); do
  # shellcheck disable=SC2086  # EXTRA and HALF are lists of overrides
  for run in "full ${MB}" "half ${MB} ${HALF}" "mb2x $((2 * MB))"; do
    read -r name mb overrides <<<"${run}"
    bench_train "${RANKS}" "${WORK}/${name}-${round}" --config "${CONFIG}" \
      --train.steps="${STEPS}" --train.micro_batch="${mb}" --train.grad_accum=1 \
      --train.warmup_steps=1 ${overrides} ${EXTRA}
  done
done

python3 - "${WORK}" "${ROUNDS}" "${SEQ_LEN}" "${H}" "${I}" "${HEADS}" "${KV}" "${HALF_KV}" \
  "$(model_key num_layers)" "$(model_key vocab_size)" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
seq, h, i, heads, kv, half_kv, layers, v = (int(x) for x in sys.argv[3:])
def flops_per_token(h, i, heads, kv):  # forward + backward: 6 x matmul parameters + attention
    kv_dim = h // heads * kv
    return 6 * (layers * (2 * h * h + 2 * h * kv_dim + 3 * h * i) + h * v) + 6 * layers * seq * h
def med(steps, f):
    return statistics.median(f(x) for x in steps)
def run(name):  # step time (stall excluded), forward+backward compute, optimizer, tokens/step
    s = []
    for k in range(1, rounds + 1):
        lines = [json.loads(l) for l in open(f"{work}/{name}-{k}/metrics.jsonl")]
        s += lines[len(lines) // 5:]
    return dict(step=med(s, lambda x: x["step_time_s"] - x["ckpt_stall_s"]),
                compute=med(s, lambda x: x["phases"]["median"]["compute_s"]),
                opt=med(s, lambda x: x["phases"]["median"]["optimizer_s"]),
                tokens=med(s, lambda x: x["tokens_per_s"] * x["step_time_s"]), n=len(s))
full, half, mb2 = run("full"), run("half"), run("mb2x")
f_ratio = flops_per_token(h // 2, i // 2, heads // 2, half_kv) / flops_per_token(h, i, heads, kv)
def line(title, r):
    print(f"{title:<24}{r['step'] * 1000:9.1f} ms/step  forward+backward {r['compute'] * 1000:9.1f} ms"
          f"  optimizer {r['opt'] * 1000:7.1f} ms  {r['tokens']:7.0f} tokens/step")
print(f"median of {full['n']} steps over {rounds} rounds (each run's first fifth left out: warm-up)")
line(f"full model (hidden {h})", full)
line(f"half width (hidden {h // 2})", half)
line("2x micro-batch", mb2)
# The judgement is on forward+backward, where the kernels are launched: the optimizer's time
# scales with the parameters, not with the tokens.
c_ratio = half["compute"] / full["compute"]
falls = (1 - c_ratio) / (1 - f_ratio)  # 1: the time falls with the FLOPs, 0: not at all
per_sample = mb2["compute"] / 2 / full["compute"]
print(f"half width: forward+backward x{c_ratio:.2f} for FLOPs x{f_ratio:.2f} (it fell "
      f"{100 * falls:.0f} % as far as the FLOPs); step x{half['step'] / full['step']:.2f}")
print(f"2x micro-batch: forward+backward per sample x{per_sample:.2f} (1.00: compute-bound, "
      f"0.50: all fixed cost); step per sample x{mb2['step'] / 2 / full['step']:.2f}")
if per_sample <= 0.65:
    verdict = (f"a fixed cost per step dominates forward+backward (twice the samples cost only "
               f"x{mb2['compute'] / full['compute']:.2f}): raise train.micro_batch")
    verdict += ("; launch/overhead-bound: it does not fall ~2x when the model halves either"
                if falls <= 0.3 else
                "; it falls with the width, so it is per-parameter work (casts, gradient copies, "
                "collectives), not kernel launches")
elif per_sample >= 0.85 and falls >= 0.7:
    verdict = "compute-bound: forward+backward grows with the samples and falls with the FLOPs"
elif falls <= 0.3:
    verdict = "launch/overhead-bound: forward+backward does not fall ~2x when the model halves"
else:
    verdict = "between compute- and overhead-bound (or noise: rerun with more steps and rounds)"
if full["opt"] > full["compute"]:
    verdict += "; the optimizer takes longer than forward+backward: more tokens per step " \
               "(train.micro_batch, train.grad_accum) spread it"
print(f"verdict: {verdict}")
PY
