#!/usr/bin/env bash
# Cost of the per-rank step-phase accounting (printed, never pass/fail): the same config trains
# with a build before it and a build with it, alternating ROUNDS times, and the script prints
# each build's median step time (step_time_s - ckpt_stall_s, the first step left out) over
# all its rounds, and the difference in percent. Also: train.profile_steps set to steps past
# the end (profiler configured, never on) against unset, with the same build.
# usage: bench/phases_cost.sh BIN_DIR_BEFORE BIN_DIR_AFTER
# FTRAIN_PHASES_COST_{CONFIG (configs/small.cfg),RANKS (4),STEPS (8),SEQ_LEN (128),ROUNDS (2),VOCAB (2000)}
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BEFORE="$1"
AFTER="$2"
CONFIG="${FTRAIN_PHASES_COST_CONFIG:-${ROOT}/configs/small.cfg}"
RANKS="${FTRAIN_PHASES_COST_RANKS:-4}"
STEPS="${FTRAIN_PHASES_COST_STEPS:-8}"
SEQ_LEN="${FTRAIN_PHASES_COST_SEQ_LEN:-128}"
ROUNDS="${FTRAIN_PHASES_COST_ROUNDS:-2}"
VOCAB="${FTRAIN_PHASES_COST_VOCAB:-2000}"  # <= model.vocab_size
CORPUS=/usr/share/common-licenses
WORK="$(mktemp -d /tmp/ftrain-phases-cost-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== phases_cost: $(basename "${CONFIG}"), ${RANKS} ranks, seq ${SEQ_LEN}, micro-batch 1," \
  "${STEPS} steps x ${ROUNDS} rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${AFTER}/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/data" "${CORPUS}" >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }

run() {  # run NAME BIN_DIR [overrides...]
  local name="$1" bin="$2"
  shift 2
  "${bin}/ftrain" launch --nproc "${RANKS}" -- train --config "${CONFIG}" \
    --data.path="${WORK}/data" --run.dir="${WORK}/${name}" --train.steps="${STEPS}" \
    --train.micro_batch=1 --train.grad_accum=1 --train.warmup_steps=1 \
    --ckpt.save_final=false --ckpt.every_steps=0 --ckpt.every_minutes=0 \
    --metrics.tensorboard=false "$@" >"${WORK}/${name}.log" 2>&1 ||
    { tail -20 "${WORK}/${name}.log" >&2; exit 1; }
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
b, nb = times("before")
a, na = times("after")
p, npf = times("profcfg")
print(f"before  ({sys.argv[3]}): {b:.3f} s/step (median of {nb})")
print(f"after   ({sys.argv[4]}): {a:.3f} s/step (median of {na}): {100 * (a / b - 1):+.2f} %")
print(f"after, profile_steps configured but never reached: {p:.3f} s/step: {100 * (p / a - 1):+.2f} % vs after")
PY
