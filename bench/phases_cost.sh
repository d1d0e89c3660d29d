#!/usr/bin/env bash
# Cost of the per-rank step-phase accounting (printed, never pass/fail): the same config trains
# with a build before it and a build with it, alternating ROUNDS times (ABAB...), and the
# script prints each build's median step time (step_time_s - ckpt_stall_s, the first step left
# out) over all its rounds, the difference in percent, and the median over the rounds of each
# pair's ratio with a 95 % confidence interval (order statistics of the pair ratios: no
# assumption about the noise), so the noise of a loaded machine shows in the figure. Give the
# same directory twice for an A/A run: its interval is the smallest difference this machine
# can resolve. Also: train.profile_steps set to steps past the end (profiler configured, never
# on) against unset, with the same build.
# usage: bench/phases_cost.sh BIN_DIR_BEFORE BIN_DIR_AFTER
# FTRAIN_PHASES_COST_{CONFIG (configs/small.cfg),RANKS (4),STEPS (8),SEQ_LEN (128),ROUNDS (2),VOCAB (2000)}
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BEFORE="$1"
AFTER="$2"
CONFIG="${FTRAIN_PHASES_COST_CONFIG:-${BENCH_ROOT}/configs/small.cfg}"
RANKS="${FTRAIN_PHASES_COST_RANKS:-4}"
STEPS="${FTRAIN_PHASES_COST_STEPS:-8}"
SEQ_LEN="${FTRAIN_PHASES_COST_SEQ_LEN:-128}"
ROUNDS="${FTRAIN_PHASES_COST_ROUNDS:-2}"
VOCAB="${FTRAIN_PHASES_COST_VOCAB:-2000}"  # <= model.vocab_size
bench_workdir phases-cost

echo "== phases_cost: $(basename "${CONFIG}"), ${RANKS} ranks, seq ${SEQ_LEN}, micro-batch 1," \
  "${STEPS} steps x ${ROUNDS} rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
BIN="${AFTER}" bench_pack "${VOCAB}" "${SEQ_LEN}"

run() {  # run NAME BIN_DIR [overrides...]
  local name="$1" bin="$2"
  shift 2
  BIN="${bin}" bench_train "${RANKS}" "${WORK}/${name}" --config "${CONFIG}" \
    --train.steps="${STEPS}" --train.micro_batch=1 --train.grad_accum=1 \
    --train.warmup_steps=1 "$@"
}

for ((i = 1; i <= ROUNDS; i++)); do
  run "before-${i}" "${BEFORE}"
  run "after-${i}" "${AFTER}"
  run "profcfg-${i}" "${AFTER}" --train.profile_steps=100000:100001
done
python3 - "${WORK}" "${ROUNDS}" "${BEFORE}" "${AFTER}" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def times(kind):
    t = []
    for i in range(1, rounds + 1):
        steps = [json.loads(l) for l in open(f"{work}/{kind}-{i}/metrics.jsonl")][1:]
        t += [s["step_time_s"] - s["ckpt_stall_s"] for s in steps]
    return statistics.median(t), len(t)
def pair_ratios(x, y):  # per round: median step of y / median step of x
    r = []
    for i in range(1, rounds + 1):
        med = lambda k: statistics.median(s["step_time_s"] - s["ckpt_stall_s"] for s in [
            json.loads(l) for l in open(f"{work}/{k}-{i}/metrics.jsonl")][1:])
        r.append(med(y) / med(x))
    return sorted(r)
def ci95(r):  # [r[k], r[n-1-k]]: the narrowest that covers the median with >= 95 %
    from math import comb
    n, k = len(r), 0
    cover = lambda k: sum(comb(n, j) for j in range(k + 1, n - k)) / 2**n
    while k + 1 < n / 2 and cover(k + 1) >= 0.95:
        k += 1
    return r[k], r[n - 1 - k], cover(k)
b, nb = times("before")
a, na = times("after")
p, npf = times("profcfg")
print(f"before  ({sys.argv[3]}): {b:.3f} s/step (median of {nb})")
print(f"after   ({sys.argv[4]}): {a:.3f} s/step (median of {na}): {100 * (a / b - 1):+.2f} %")
print(f"after, profile_steps configured but never reached: {p:.3f} s/step: {100 * (p / a - 1):+.2f} % vs after")
for name, (x, y) in {"after / before": ("before", "after"),
                     "profile configured / after": ("after", "profcfg")}.items():
    r = pair_ratios(x, y)
    lo, hi, cover = ci95(r)
    print(f"{name}, per pair: median {100 * (statistics.median(r) - 1):+.2f} % over {rounds} "
          f"pairs, {100 * cover:.0f} % interval [{100 * (lo - 1):+.2f} %, {100 * (hi - 1):+.2f} %]")
PY
