#!/usr/bin/env bash
# How much a checkpoint persisting in the background slows training, and what the trainer
# stalls for, in one run on this machine (printed, never pass/fail). `ftrain train` of
# configs/small.cfg (100M parameters, 1 rank, train.threads=1) with:
#   none      no checkpoints at all (the baseline step time)
#   sync      ckpt.daemon=off: the checkpoint is written on the training thread
#   ckptd T/N[/Z[/R]] ckpt.daemon=require with a ckptd of --threads T --nice N
#             [--zstd-level Z] [--max-mb-s R]
# Checkpoints every CKPT_EVERY steps. Step time excludes the checkpoint stall (that is
# reported on its own). "overlap" = the steps between checkpoints (after the first one),
# while the daemon compresses and writes (its persist takes about CKPT_EVERY - 1 steps with
# the defaults); interference = overlap mean / baseline mean - 1 (steps 1-2 are warm-up).
# usage: bench/ckptd_interference.sh   (after `ninja -C build ftrain ftrain-data ckptd`)
#   FTRAIN_IFERENCE_{STEPS,CKPT_EVERY,SEQ_LEN,DAEMONS} override the defaults below;
#   FTRAIN_IFERENCE_DIR puts the work (and so the checkpoints) elsewhere (e.g. /dev/shm: no disk
#   write-back); FTRAIN_IFERENCE_PIN=1 pins the trainer to CPU 0 and ckptd to CPU 1 (taskset), as a site
#   would with cgroups / srun --cpu-bind: the daemon then never runs on the trainer's core.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${ROOT}/configs/small.cfg"
STEPS="${FTRAIN_IFERENCE_STEPS:-20}"
CKPT_EVERY="${FTRAIN_IFERENCE_CKPT_EVERY:-3}"
SEQ_LEN="${FTRAIN_IFERENCE_SEQ_LEN:-128}"
DAEMONS="${FTRAIN_IFERENCE_DAEMONS:-2/0 1/19 1/19/1/150}"  # threads/nice[/zstd[/MB/s]]
WORK="$(mktemp -d "${FTRAIN_IFERENCE_DIR:-/var/tmp}/ftrain-iference-XXXXXX")"
daemon_pid=""
cleanup() {
  if [ -n "${daemon_pid}" ]; then kill "${daemon_pid}" 2>/dev/null || true; wait "${daemon_pid}" 2>/dev/null || true; fi
  rm -rf "${WORK}"
}
trap cleanup EXIT
[ -n "${FTRAIN_IFERENCE_KEEP:-}" ] && trap - EXIT
export FTRAIN_CKPTD_NODE=bench
PIN_TRAINER=(); PIN_DAEMON=()
if [ "${FTRAIN_IFERENCE_PIN:-0}" = 1 ]; then PIN_TRAINER=(taskset -c 0); PIN_DAEMON=(taskset -c 1); fi

echo "== ckptd_interference: small.cfg, 1 rank, ${STEPS} steps, checkpoint every ${CKPT_EVERY}, pin ${FTRAIN_IFERENCE_PIN:-0}," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 2000 --seq-len "${SEQ_LEN}" --progress none \
  --out "${WORK}/data" /usr/share/common-licenses >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }

train() {  # name, extra args...
  local name="$1"; shift
  "${PIN_TRAINER[@]}" "${BIN}/ftrain" train --config "${CONFIG}" --data.path="${WORK}/data" \
    --run.dir="${WORK}/run-${name}" --train.steps="${STEPS}" --train.micro_batch=1 \
    --train.grad_accum=1 --train.warmup_steps=2 --ckpt.every_minutes=0 --ckpt.keep=2 "$@" \
    >"${WORK}/train-${name}.log" 2>&1 || { tail -20 "${WORK}/train-${name}.log" >&2; exit 1; }
  echo "   ${name}: done" >&2
}

runs="none sync"
train none --ckpt.every_steps=0 --ckpt.save_final=false
train sync --ckpt.every_steps="${CKPT_EVERY}" --ckpt.daemon=off --ckpt.save_final=false
for d in ${DAEMONS}; do
  IFS=/ read -r t n z r <<<"${d}"; z="${z:-1}"; r="${r:-0}"
  name="ckptd-t${t}-n${n}-z${z}"; [ "${r}" = 0 ] || name="${name}-${r}MBs"
  mkdir -p "${WORK}/run-${name}"
  "${PIN_DAEMON[@]}" "${BIN}/ckptd" --root "${WORK}/run-${name}/checkpoints" --run-dir "${WORK}/run-${name}" \
    --threads "${t}" --nice "${n}" --zstd-level "${z}" --max-mb-s "${r}" --keep 2 >"${WORK}/ckptd-${name}.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do [ -S "${WORK}/run-${name}/ckptd-bench/sock" ] && break; sleep 0.05; done
  train "${name}" --ckpt.every_steps="${CKPT_EVERY}" --ckpt.daemon=require --ckpt.save_final=false
  kill "${daemon_pid}"; wait "${daemon_pid}" || true; daemon_pid=""
  grep -o 'persist_s=[0-9.]*' "${WORK}/ckptd-${name}.log" | cut -d= -f2 >"${WORK}/persist-${name}.txt" || true
  runs="${runs} ${name}"
done

# shellcheck disable=SC2086  # runs is a list
/usr/bin/python3 - "${WORK}" "${CKPT_EVERY}" ${runs} <<'PY'
import json, os, statistics, sys
work, every, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(name):
    return [json.loads(l) for l in open(os.path.join(work, f"run-{name}", "metrics.jsonl"))][2:]
mean, med = statistics.mean, statistics.median
def work_time(s):
    return s["step_time_s"] - s.get("ckpt_stall_s", 0)
base = [work_time(s) for s in load("none")]
b = mean(base)
print(f"baseline (no checkpoints): mean step {b:.3f} s (min {min(base):.2f}, max {max(base):.2f}) over {len(base)} steps")
print(f"{'run':<24}{'step (all)':>11}{'step (overlap)':>15}{'interference':>13}{'stall/ckpt':>11}{'persist':>9}")
for name in runs[1:]:
    steps = load(name)
    overlap = [work_time(s) for s in steps if s["step"] % every != 0 and s["step"] > every]
    stalls = [s["ckpt_stall_s"] for s in steps if s.get("ckpt_stall_s", 0) > 0]
    pf = os.path.join(work, f"persist-{name}.txt")
    persist = [float(x) for x in open(pf)] if os.path.exists(pf) else []
    o = mean(overlap)
    print(f"{name:<24}{mean(work_time(s) for s in steps):>10.3f}s{o:>14.3f}s{100 * (o / b - 1):>12.1f}%"
          f"{med(stalls) if stalls else 0:>10.3f}s"
          f"{(format(med(persist), '.1f') + 's') if persist else '-':>9}")
PY
