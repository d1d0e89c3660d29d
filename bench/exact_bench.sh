#!/usr/bin/env bash
# dist.reduce = exact against float, in the same run of this script (printed, never
# pass/fail): `ftrain launch --nproc N -- train` of CONFIG with the same global batch both ways
# (float: grad_accum = MICRO_BATCHES / N; exact: global_batch = MICRO_BATCHES x micro_batch),
# alternating float and exact REPEAT times so that load drifts hit both; median step time
# (step 1 is warm-up and not counted), communication wait and bytes sent per step from
# metrics.jsonl (rank 0). Then exact_accuracy_bench: the exact and the fp32 mean gradient of
# MICRO_BATCHES micro-batches against an fp64 reference, per block.
# usage: bench/exact_bench.sh   (after `ninja -C build ftrain exact_accuracy_bench`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="${FTRAIN_EXACT_BENCH_CONFIG:-${ROOT}/configs/tiny.cfg}"
RANKS="${FTRAIN_EXACT_BENCH_RANKS:-2}"
MICRO_BATCHES="${FTRAIN_EXACT_BENCH_MICRO_BATCHES:-4}"  # per step, all ranks; a multiple of RANKS
MICRO_BATCH="${FTRAIN_EXACT_BENCH_MICRO_BATCH:-4}"
STEPS="${FTRAIN_EXACT_BENCH_STEPS:-20}"
REPEAT="${FTRAIN_EXACT_BENCH_REPEAT:-2}"
VOCAB="${FTRAIN_EXACT_BENCH_VOCAB:-512}"  # <= model.vocab_size
SEQ_LEN="${FTRAIN_EXACT_BENCH_SEQ_LEN:-32}"
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_workdir exact-bench
bench_pack "${VOCAB}" "${SEQ_LEN}"
echo "== exact_bench: $(basename "${CONFIG}"), ${RANKS} ranks, ${MICRO_BATCHES} micro-batches of" \
  "${MICRO_BATCH} per step, ${STEPS} steps x ${REPEAT}, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

summary() {  # RUN -> "median_step_s median_comm_s bytes_per_step"
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]
med = lambda k: statistics.median(r.get(k, 0) for r in rows)
sent = statistics.median(r.get("phases", {}).get("comm_bytes", 0) for r in rows)
print(f"{med('step_time_s'):.4f} {med('comm_s'):.4f} {int(sent)}")
PY
}

accum=$((MICRO_BATCHES / RANKS))
printf '%-6s %-4s %-12s %-12s %-14s\n' mode try step_s comm_s sent_B/step
for try in $(seq 1 "${REPEAT}"); do
  for mode in float exact; do
    run="${WORK}/${mode}-${try}"
    if [ "${mode}" = exact ]; then
      extra=(--dist.reduce=exact "--train.global_batch=$((MICRO_BATCHES * MICRO_BATCH))")
    else
      extra=("--train.grad_accum=${accum}")
    fi
    bench_train "${RANKS}" "${run}" --config "${CONFIG}" "--train.steps=${STEPS}" \
      "--train.micro_batch=${MICRO_BATCH}" "${extra[@]}"
    read -r step comm bytes < <(summary "${run}")
    printf '%-6s %-4s %-12s %-12s %-14s\n' "${mode}" "${try}" "${step}" "${comm}" "${bytes}"
  done
done
echo "== accuracy (exact_accuracy_bench, ${MICRO_BATCHES} micro-batches of ${MICRO_BATCH}):"
"${BIN}/exact_accuracy_bench" --config "${CONFIG}" --micro-batches "${MICRO_BATCHES}" \
  --rows "${MICRO_BATCH}"
