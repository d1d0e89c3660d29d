#!/usr/bin/env bash
# Scaling efficiency, measured (printed, never pass/fail): the same config trains on 1, 2 and
# 4 ranks (`ftrain launch`, CPU + Gloo) for each sharding strategy with the same global batch
# (micro_batch = GLOBAL / N), and the script prints the median step time TN (the first fifth of
# the steps excluded: warm-up), the strong-scaling efficiency T1 / (N * TN) (1.0 = N ranks
# finish a step N times faster) and the share of the step the median rank waited on
# collectives and at the step boundary (metrics.jsonl "phases").
# usage: bench/scaling.sh [CONFIG]   (default configs/tiny.cfg; BIN_DIR from FTRAIN_BIN_DIR)
# FTRAIN_SCALING_STEPS (default 30), FTRAIN_SCALING_RANKS ("1 2 4"), FTRAIN_SCALING_GLOBAL_BATCH (8),
# FTRAIN_SCALING_STRATEGIES ("full_shard no_shard"), FTRAIN_SCALING_ARGS (extra overrides).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONFIG="${1:-${BENCH_ROOT}/configs/tiny.cfg}"
STEPS="${FTRAIN_SCALING_STEPS:-30}"
RANKS="${FTRAIN_SCALING_RANKS:-1 2 4}"
STRATEGIES="${FTRAIN_SCALING_STRATEGIES:-full_shard no_shard}"
EXTRA="${FTRAIN_SCALING_ARGS:-}"
GLOBAL="${FTRAIN_SCALING_GLOBAL_BATCH:-8}"
bench_workdir scaling

echo "== scaling: $(basename "${CONFIG}"), ${STEPS} steps, ranks ${RANKS}, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
bench_pack 512 64

for strategy in ${STRATEGIES}; do
  for n in ${RANKS}; do
    # shellcheck disable=SC2086  # EXTRA is a list of overrides
    bench_train "${n}" "${WORK}/${strategy}-${n}" --config "${CONFIG}" --train.steps="${STEPS}" \
      --dist.sharding="${strategy}" --train.micro_batch=$((GLOBAL / n)) ${EXTRA}
  done
  # shellcheck disable=SC2086  # one argument per rank count
  python3 - "${WORK}" "${strategy}" ${RANKS} <<'PY'
import json, statistics, sys
work, strategy, ranks = sys.argv[1], sys.argv[2], [int(r) for r in sys.argv[3:]]
t = {}
for n in ranks:
    steps = [json.loads(l) for l in open(f"{work}/{strategy}-{n}/metrics.jsonl")]
    steps = steps[len(steps) // 5:]  # warm-up
    t[n] = statistics.median(s["step_time_s"] for s in steps)
    comm = statistics.median(s["phases"]["median"]["comm_wait_s"] for s in steps)
    wait = statistics.median(s["phases"]["median"]["boundary_wait_s"] for s in steps)
    eff = t[ranks[0]] * ranks[0] / (n * t[n])
    print(f"{strategy:>13} N={n}: T{n} = {t[n] * 1000:8.1f} ms/step   T1/(N*TN) = {eff:5.2f}   "
          f"exposed comm {comm / t[n] * 100:4.1f} %, "
          f"boundary wait {wait / t[n] * 100:4.1f} %")
PY
done
