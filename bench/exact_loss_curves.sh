#!/usr/bin/env bash
# dist.reduce = exact against the fp32 reduction over a whole training run (issue 47's accuracy
# question), printed, never pass/fail: the same model, data and global batch trained SEEDS
# times each way (train.seed changes the initial weights and the sample order), RANKS ranks,
# STEPS steps; the held-out loss every EVAL_EVERY steps on a file left out of the training
# data. Prints per run the mean training loss of the last 10% of steps and the final held-out
# loss; then the spread across seeds of each mode, the largest |exact - fp32| of the same seed
# (per step and final held-out), and that gap as a fraction of the seed spread.
# usage: bench/exact_loss_curves.sh   (after `ninja -C build ftrain`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="${FTRAIN_CURVES_CONFIG:-${ROOT}/configs/tiny.cfg}"
RANKS="${FTRAIN_CURVES_RANKS:-2}"
STEPS="${FTRAIN_CURVES_STEPS:-1000}"
SEEDS="${FTRAIN_CURVES_SEEDS:-1 2 3}"
MICRO_BATCH="${FTRAIN_CURVES_MICRO_BATCH:-4}"
MICRO_BATCHES="${FTRAIN_CURVES_MICRO_BATCHES:-4}"  # per step, all ranks; a multiple of RANKS
EVAL_EVERY="${FTRAIN_CURVES_EVAL_EVERY:-100}"
VOCAB="${FTRAIN_CURVES_VOCAB:-512}"  # <= model.vocab_size
SEQ_LEN="${FTRAIN_CURVES_SEQ_LEN:-64}"
MODEL="${FTRAIN_CURVES_MODEL:---model.hidden_size=128 --model.intermediate_size=344 --model.num_layers=4}"
HELDOUT=MPL-2.0  # of /usr/share/common-licenses: never trained on
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_workdir exact-curves
mkdir -p "${WORK}/corpus"
for f in "${BENCH_CORPUS}"/*; do
  if [ "$(basename "${f}")" != "${HELDOUT}" ]; then cp -L "${f}" "${WORK}/corpus/"; fi
done
BENCH_CORPUS="${WORK}/corpus" bench_pack "${VOCAB}" "${SEQ_LEN}"
"${BIN}/ftrain" pack --tokenizer "${WORK}/data/tokenizer.model" --seq-len "${SEQ_LEN}" \
  --progress none --out "${WORK}/heldout" "/usr/share/common-licenses/${HELDOUT}" >/dev/null \
  2>>"${WORK}/pack.log" || { cat "${WORK}/pack.log" >&2; exit 1; }
echo "== exact_loss_curves: $(basename "${CONFIG}") ${MODEL}, ${RANKS} ranks, ${MICRO_BATCHES}" \
  "micro-batches of ${MICRO_BATCH} x ${SEQ_LEN} tokens per step, ${STEPS} steps, seeds ${SEEDS}," \
  "held-out ${HELDOUT} every ${EVAL_EVERY}; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

accum=$((MICRO_BATCHES / RANKS))
for seed in ${SEEDS}; do
  for mode in float exact; do
    if [ "${mode}" = exact ]; then
      extra=(--dist.reduce=exact "--train.global_batch=$((MICRO_BATCHES * MICRO_BATCH))")
    else
      extra=("--train.grad_accum=${accum}")
    fi
    # shellcheck disable=SC2086  # MODEL is a list of overrides
    bench_train "${RANKS}" "${WORK}/${mode}-${seed}" --config "${CONFIG}" ${MODEL} \
      "--train.steps=${STEPS}" "--train.seed=${seed}" "--train.micro_batch=${MICRO_BATCH}" \
      "--train.warmup_steps=$((STEPS / 20))" "--eval.path=${WORK}/heldout" \
      "--eval.every_steps=${EVAL_EVERY}" --eval.batches=8 "${extra[@]}"
  done
done

python3 - "${WORK}" "${SEEDS}" <<'PY'
import json, statistics, sys
work, seeds = sys.argv[1], sys.argv[2].split()
def load(mode, seed):
    rows = [json.loads(l) for l in open(f"{work}/{mode}-{seed}/metrics.jsonl") if l.strip()]
    loss = {r["step"]: r["loss"] for r in rows}
    ev = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    return loss, ev
runs = {(m, s): load(m, s) for m in ("float", "exact") for s in seeds}
steps = sorted(runs[("float", seeds[0])][0])
tail = steps[-max(1, len(steps) // 10):]
print(f"{'mode':6} {'seed':>4} {'train loss, last 10%':>22} {'held-out loss (end)':>20}")
final = {}
for (m, s), (loss, ev) in runs.items():
    t = statistics.mean(loss[k] for k in tail)
    e = ev[max(ev)]
    final[(m, s)] = (t, e)
    print(f"{m:6} {s:>4} {t:>22.5f} {e:>20.5f}")
for m in ("float", "exact"):
    ts = [final[(m, s)][0] for s in seeds]; es = [final[(m, s)][1] for s in seeds]
    print(f"{m}: seed spread (max - min) train {max(ts) - min(ts):.5f}, held-out {max(es) - min(es):.5f};"
          f" mean held-out {statistics.mean(es):.5f}")
spread = max(final[("float", s)][1] for s in seeds) - min(final[("float", s)][1] for s in seeds)
gap_step = max(abs(runs[("exact", s)][0][k] - runs[("float", s)][0][k]) for s in seeds for k in steps)
gap_eval = max(abs(final[("exact", s)][1] - final[("float", s)][1]) for s in seeds)
gap_mean = abs(statistics.mean(final[("exact", s)][1] for s in seeds) -
               statistics.mean(final[("float", s)][1] for s in seeds))
print(f"same seed, exact vs fp32: largest per-step train-loss gap {gap_step:.5f}; largest final"
      f" held-out gap {gap_eval:.5f}; gap of the seed means {gap_mean:.5f}"
      f" = {gap_mean / spread if spread else float('nan'):.2f} x the fp32 seed spread ({spread:.5f})")
PY
