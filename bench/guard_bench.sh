#!/usr/bin/env bash
# The guard's cost (printed, never pass/fail): the same training run with guard.policy = off
# and with the guard on (skip + a spike window), alternated ROUNDS times in one invocation so
# that both see the same machine load. Prints each arm's median step time over every round's
# steps (the first step of each run and checkpoint steps left out) and the relative
# difference, and each arm's median checkpoint stall (the guard's finiteness scan is there).
# With FTRAIN_GUARD_BENCH_SDC=1 the arms are instead the replica check for silent data
# corruption (guard.sdc_every_steps) off, every step and every 10 steps, under no_shard (every
# rank a replica), with each arm's mean step time and its ratio to the off arm's.
# usage: bench/guard_bench.sh [BIN_DIR]   (default: build/bin)
#   FTRAIN_GUARD_BENCH_CONFIG (configs/small.cfg), _SEQ_LEN (256), _NPROC (2), _STEPS (16),
#   _ROUNDS (3), _DEVICE (cpu | cuda), _EVERY (checkpoint every N steps, 4), _SDC (0 | 1),
#   _VOCAB (tokenizer size, 2000; configs/tiny.cfg needs 512)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_GUARD_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_GUARD_BENCH_SEQ_LEN:-256}"
NPROC="${FTRAIN_GUARD_BENCH_NPROC:-2}"
STEPS="${FTRAIN_GUARD_BENCH_STEPS:-16}"
ROUNDS="${FTRAIN_GUARD_BENCH_ROUNDS:-3}"
DEVICE="${FTRAIN_GUARD_BENCH_DEVICE:-cpu}"
EVERY="${FTRAIN_GUARD_BENCH_EVERY:-4}"
SDC="${FTRAIN_GUARD_BENCH_SDC:-0}"
VOCAB="${FTRAIN_GUARD_BENCH_VOCAB:-2000}"  # the tokenizer packed: the config's vocab_size or less
CORPUS=/usr/share/common-licenses
WORK="$(mktemp -d /tmp/ftrain-guard-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

DEVICE_ARGS=()
if [[ "${DEVICE}" == cuda ]]; then
  DEVICE_ARGS=(--train.device=cuda --dist.backend=nccl --train.param_dtype=bfloat16)
fi
echo "== guard_bench: $(basename "${CONFIG}"), seq_len ${SEQ_LEN}, ${NPROC} ranks on ${DEVICE}," \
  "${STEPS} steps x ${ROUNDS} rounds per arm, checkpoint every ${EVERY}, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${BIN}/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/data" "${CORPUS}" >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }

run_arm() {  # run_arm NAME ROUND ARGS...
  local name="$1" round="$2"
  shift 2
  local run="${WORK}/${name}-${round}"
  "${BIN}/ftrain" launch --nproc "${NPROC}" -- train --config "${CONFIG}" \
    --data.path="${WORK}/data" --run.dir="${run}" --train.steps="${STEPS}" \
    --train.micro_batch=1 --train.warmup_steps=1 --ckpt.every_minutes=0 \
    --ckpt.every_steps="${EVERY}" --ckpt.daemon=off "${DEVICE_ARGS[@]}" "$@" \
    >"${run}.log" 2>&1 || { tail -20 "${run}.log" >&2; exit 1; }
}

if [[ "${SDC}" == 1 ]]; then
  ARMS=(sdc_off sdc_every_1 sdc_every_10)
  for round in $(seq 1 "${ROUNDS}"); do
    run_arm sdc_off "${round}" --dist.sharding=no_shard --guard.sdc_every_steps=0
    run_arm sdc_every_1 "${round}" --dist.sharding=no_shard --guard.sdc_every_steps=1
    run_arm sdc_every_10 "${round}" --dist.sharding=no_shard --guard.sdc_every_steps=10
  done
else
  ARMS=(off on)
  for round in $(seq 1 "${ROUNDS}"); do
    run_arm off "${round}" --guard.policy=off
    run_arm on "${round}" --guard.policy=skip --guard.spike_window=8
  done
fi

if [[ "${SDC}" == 1 ]]; then  # what one check cost (rank 0 logs its first), per run
  grep -ho "replica check after step [0-9]* took [0-9.e+-]* ms" "${WORK}"/sdc_every_*.log |
    sed 's/^/  /' || true
fi

python3 - "${WORK}" "${ROUNDS}" "${EVERY}" "${ARMS[@]}" <<'PY'
import json, statistics, sys
work, rounds, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
arms = sys.argv[4:]
def arm(name):
    steps, stalls = [], []
    for r in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(f"{work}/{name}-{r}/metrics.jsonl")]
        for rec in recs[1:]:
            if rec["step"] % every == 0:
                stalls.append(rec["ckpt_stall_s"])
            elif rec.get("ckpt_stall_s", 0) == 0:
                steps.append(rec["step_time_s"])
    return (statistics.median(steps), len(steps), statistics.median(stalls) if stalls else 0,
            statistics.mean(steps))
if arms == ["off", "on"]:
    off, on = arm("off"), arm("on")
    print(f"guard off: step {off[0]*1e3:.2f} ms (median of {off[1]}), checkpoint stall {off[2]*1e3:.1f} ms")
    print(f"guard on:  step {on[0]*1e3:.2f} ms (median of {on[1]}), checkpoint stall {on[2]*1e3:.1f} ms")
    print(f"guard cost per step: {(on[0] / off[0] - 1) * 100:+.2f} %")
else:
    # The mean, not the median: every 10th step's check would fall out of a median.
    base = arm(arms[0])
    for name in arms:
        a = arm(name)
        print(f"{name:13s} step mean {a[3]*1e3:.2f} ms, median {a[0]*1e3:.2f} ms (of {a[1]}), "
              f"checkpoint stall {a[2]*1e3:.1f} ms, mean ratio to {arms[0]} {a[3] / base[3]:.4f}")
PY
