#!/usr/bin/env bash
# FSDP engine numbers (printed, never pass/fail) for configs/small.cfg on N = 1, 2, 4 local
# ranks (`ftrain launch`, Gloo over loopback) per sharding strategy: step time, the fraction
# of it the compute thread waited on collectives (with and without prefetch), bytes sent per
# step vs theory (full shard: 3 x params x bytes x (N-1)/N), persistent state bytes per rank vs
# `ftrain plan`'s prediction, and peak RSS per rank. Runs build/bin/fsdp_worker (synthetic
# tokens, bf16 compute and gradient reduction, fp32 master + AdamW, activation checkpointing).
# The first step of every run is warm-up and not timed.
# usage: bench/fsdp_bench.sh   (after `ninja -C build ftrain fsdp_worker`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_FSDP_BENCH_CONFIG:-${ROOT}/configs/small.cfg}"
SEQ_LEN="${FTRAIN_FSDP_BENCH_SEQ_LEN:-128}"
MICRO_BATCH="${FTRAIN_FSDP_BENCH_MICRO_BATCH:-1}"
STEPS="${FTRAIN_FSDP_BENCH_STEPS:-3}"  # including 1 warm-up step
RANKS="${FTRAIN_FSDP_BENCH_RANKS:-1 2 4}"
STRATEGIES="${FTRAIN_FSDP_BENCH_STRATEGIES:-full_shard shard_grad_op no_shard hybrid_shard}"
DTYPE=bfloat16
REDUCE_DTYPE=bfloat16
WORK="$(mktemp -d /tmp/ftrain-fsdp-bench-XXXXXX)"
trap 'rm -rf "${WORK}"' EXIT

echo "== fsdp_bench: $(basename "${CONFIG}"), seq_len ${SEQ_LEN}, micro-batch ${MICRO_BATCH} per rank," \
  "${STEPS} steps (1 warm-up), ${DTYPE} compute / ${REDUCE_DTYPE} reduction, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# run NAME NPROC NODES SHARDING PREFETCH
run() {
  local name="$1" nproc="$2" nodes="$3" sharding="$4" prefetch="$5"
  local worker=("${BIN}/fsdp_worker" --out "${WORK}/${name}" --config "${CONFIG}"
    --sharding "${sharding}" --steps "${STEPS}" --micro-batch "${MICRO_BATCH}"
    --seq-len "${SEQ_LEN}" --dtype "${DTYPE}" --reduce-dtype "${REDUCE_DTYPE}"
    --prefetch "${prefetch}" --bin 0)
  local start end
  start=$(date +%s)
  if [ "${nproc}" = 1 ]; then
    "${worker[@]}" 2>"${WORK}/${name}.log" || { cat "${WORK}/${name}.log" >&2; exit 1; }
  else
    "${BIN}/ftrain" launch --nproc "${nproc}" --nodes "${nodes}" -- "${worker[@]}" \
      2>"${WORK}/${name}.log" || { cat "${WORK}/${name}.log" >&2; exit 1; }
  fi
  end=$(date +%s)
  echo "   ${name}: $((end - start)) s" >&2
}

for n in ${RANKS}; do
  "${BIN}/ftrain" plan --model "${CONFIG}" --nodes 1 --gpus-per-node "${n}" --json \
    >"${WORK}/plan-1x${n}.json"
  if [ "${n}" = 1 ]; then
    # One rank: every strategy is the same computation with no communication.
    run "full_shard-1-pf1" 1 1 full_shard 1
    continue
  fi
  for s in ${STRATEGIES}; do
    nodes=1
    if [ "${s}" = hybrid_shard ]; then
      # hybrid needs more than one node to differ from full_shard: 2 nodes x N/2 ranks.
      if [ $((n % 2)) != 0 ] || [ "${n}" -lt 4 ]; then continue; fi
      nodes=2
      "${BIN}/ftrain" plan --model "${CONFIG}" --nodes 2 --gpus-per-node $((n / 2)) --json \
        >"${WORK}/plan-2x$((n / 2)).json"
    fi
    run "${s}-${n}-pf1" "${n}" "${nodes}" "${s}" 1
    if [ "${s}" = full_shard ]; then run "${s}-${n}-pf0" "${n}" 1 "${s}" 0; fi
  done
done

python3 - "${WORK}" <<'PY'
import glob, json, os, statistics, sys
work = sys.argv[1]
PLAN_NAME = {"full_shard": "full_shard", "shard_grad_op": "zero2", "no_shard": "ddp",
             "hybrid_shard": "hybrid_shard"}
rows = []
for path in glob.glob(os.path.join(work, "*.json")):
    base = os.path.basename(path)
    if base.startswith("plan-"):
        continue
    strategy, n, pf = base[:-5].rsplit("-", 2)
    rows.append((strategy, int(n), int(pf[2:]), json.load(open(path))))
rows.sort(key=lambda r: (r[1], r[0], -r[2]))
MB = 1e6
print(f"{'strategy':<14}{'N':>3}{'pf':>3}{'step_s':>8}{'wait_s':>8}{'wait%':>7}"
      f"{'sent_MB':>9}{'theory_MB':>10}{'sent/th':>8}{'state_MB':>9}{'plan_MB':>8}"
      f"{'st/plan':>8}{'rss_MB':>8}{'rss0_MB':>8}")
for strategy, n, pf, d in rows:
    P = d["params"]
    timed = slice(1, None) if len(d["step_time_s"]) > 1 else slice(0, None)
    step = statistics.median(d["step_time_s"][timed])
    wait = statistics.median(d["comm_wait_s"][timed])
    sent = statistics.median(d["comm_bytes"][timed])
    b = 2  # bf16 parameters and gradients
    if strategy == "hybrid_shard":
        g, r = n // 2, 2
        theory = 3 * P * b * (g - 1) / g + 2 * (P / g) * b * (r - 1) / r
        plan = json.load(open(os.path.join(work, f"plan-2x{g}.json")))
    else:
        theory = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 2}[strategy] * P * b * (n - 1) / n
        plan = json.load(open(os.path.join(work, f"plan-1x{n}.json")))
    pred = next(s for s in plan["strategies"] if s["name"] == PLAN_NAME[strategy])
    state = pred["state_bytes_per_gpu"]
    print(f"{strategy:<14}{n:>3}{pf:>3}{step:8.2f}{wait:8.3f}{100 * wait / step:6.1f}%"
          f"{sent / MB:9.0f}{theory / MB:10.0f}{(sent / theory if theory else 0):8.3f}"
          f"{d['persistent_bytes'] / MB:9.0f}{state / MB:8.0f}{d['persistent_bytes'] / state:8.3f}"
          f"{max(d['peak_rss_steps_bytes']) / MB:8.0f}{max(d['peak_rss_startup_bytes']) / MB:8.0f}")
print("step_s, wait_s, sent_MB: rank 0, median of the timed steps. theory: bytes one rank sends "
      "per step (ring collectives, bf16): full_shard 3P(N-1)/N x 2 B, shard_grad_op and no_shard "
      "2P(N-1)/N x 2 B, hybrid G x R: 3P(G-1)/G + 2(P/G)(R-1)/R, x 2 B. state: persistent "
      "parameter+gradient+master+moment shards per rank; plan: `ftrain plan` state_bytes_per_gpu "
      "(shard_grad_op vs plan's zero2, no_shard vs ddp). rss_MB: max over ranks of peak RSS "
      "during the steps; rss0_MB: peak RSS of start-up (full fp32 model built before sharding).")
PY
