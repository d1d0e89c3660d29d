#!/usr/bin/env bash
# What the memory tier (ckpt.memory_every_steps, issue 35) costs the training, in one run on
# this machine (printed, never pass/fail): `ftrain launch --nproc 2 --nodes 2` of CONFIG with
# a ckptd per simulated node in a buddy ring (node0 <-> node1), no disk checkpoints, and the
# memory tier off, then every 20, 5 and 1 steps. Per setting: mean step time (steps 1-2 are
# warm-up), its overhead against "off", the trainer's stall per memory snapshot (the phase
# clock's checkpoint share), the snapshots that became restorable, and the replication bytes
# per second against the step's own collective bytes (FSDP full_shard, fp32: all-gather in
# forward and backward + reduce-scatter of the gradients = 3 x 4 bytes x P x (W-1)/W per rank).
# A setting is EVERY[/MBPS]: MBPS caps each daemon's replication (ckptd --replication-mbps,
# FTRAIN_REPLICATION_MBPS), "off" runs the daemons without a buddy (no replication); so the
# default list also gives, in the same run, the step time with and without replication and the
# replication throughput (the daemons' "replicated ... bytes= seconds=" lines) capped and
# uncapped, and the newest step MEMORY_TIER.json recorded as restorable.
# usage: bench/memory_tier_bench.sh   (after `ninja -C build ftrain ckptd ckptctl`)
#   FTRAIN_MEMTIER_{CONFIG,STEPS,SETTINGS,CAP_MBPS} override the defaults below.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
CONFIG="${FTRAIN_MEMTIER_CONFIG:-${ROOT}/configs/tiny.cfg}"
STEPS="${FTRAIN_MEMTIER_STEPS:-150}"
CAP="${FTRAIN_MEMTIER_CAP_MBPS:-10}"
SETTINGS="${FTRAIN_MEMTIER_SETTINGS:-0 20 5 1 1/off 5/${CAP} 1/${CAP}}"
WORK="$(mktemp -d /tmp/ftrain-memtier-XXXXXX)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; wait "${p}" 2>/dev/null || true; done
  rm -rf "${WORK}"
}
trap cleanup EXIT
[ -n "${FTRAIN_MEMTIER_KEEP:-}" ] && trap - EXIT

echo "== memory_tier_bench: $(basename "${CONFIG}"), 2 ranks on 2 simulated nodes, ${STEPS} steps," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 64 --progress none \
  --out "${WORK}/data" /usr/share/common-licenses >/dev/null 2>"${WORK}/pack.log" ||
  { cat "${WORK}/pack.log" >&2; exit 1; }
printf 'memory-tier-bench-secret-0123456789\n' >"${WORK}/secret"
chmod 600 "${WORK}/secret"

run() {  # EVERY[/MBPS]
  local every="${1%%/*}" mbps="0" run="${WORK}/run-${1//\//_}" n peer
  [[ "$1" == */* ]] && mbps="${1#*/}"
  mkdir -p "${run}"
  pids=()
  for n in 0 1; do
    peer=(--peer-listen 127.0.0.1:0 --buddy-file "${run}/ckptd-launch-node$((1 - n))/peer-addr"
      --job-id bench --job-secret-file "${WORK}/secret" --replication-mbps "${mbps}")
    [ "${mbps}" = off ] && peer=()
    "${BIN}/ckptd" --root "${run}/checkpoints" --run-dir "${run}" --node "launch-node${n}" \
      --threads 1 "${peer[@]}" >"${run}/ckptd-${n}.log" 2>&1 &
    pids+=("$!")
  done
  for _ in $(seq 200); do
    [ -S "${run}/ckptd-launch-node0/sock" ] && [ -S "${run}/ckptd-launch-node1/sock" ] && break
    sleep 0.05
  done
  "${BIN}/ftrain" launch --nproc 2 --nodes 2 -- train --config "${CONFIG}" --data.path="${WORK}/data" \
    --run.dir="${run}" --train.steps="${STEPS}" --ckpt.every_steps=0 --ckpt.every_minutes=0 \
    --ckpt.save_final=false --ckpt.daemon=require --ckpt.memory_every_steps="${every}" \
    --metrics.tensorboard=false >"${run}/train.log" 2>&1 || { tail -20 "${run}/train.log" >&2; exit 1; }
  "${BIN}/ckptctl" status "${run}" --json >"${run}/status.json" 2>/dev/null || true
  for n in "${pids[@]}"; do kill "${n}"; wait "${n}" || true; done
  pids=()
  echo "   memory every ${every}, replication cap ${mbps}: done" >&2
}
for e in ${SETTINGS}; do run "${e}"; done

# shellcheck disable=SC2086  # SETTINGS is a list
/usr/bin/python3 - "${WORK}" ${SETTINGS} <<'PY'
import json, os, re, statistics, sys
work, settings = sys.argv[1], sys.argv[2:]
def d(e):
    return os.path.join(work, "run-" + e.replace("/", "_"))
def steps(e):
    return [json.loads(l) for l in open(os.path.join(d(e), "metrics.jsonl"))][2:]
def params(e):
    m = re.search(r"([0-9,]+) parameters", open(os.path.join(d(e), "train.log")).read())
    return int(m.group(1).replace(",", "")) if m else 0
def throughput(e):  # the daemons' completed transfers: their bytes over their seconds, MB/s
    b = s = 0.0
    for n in (0, 1):
        try:
            log = open(os.path.join(d(e), f"ckptd-{n}.log")).read()
        except OSError:
            continue
        for x, y in re.findall(r"replicated step=.* bytes=([0-9]+) seconds=([0-9.e+-]+)", log):
            b, s = b + float(x), s + float(y)
    return b / s / 1e6 if s > 0 else 0.0
def restorable(e):  # the newest step MEMORY_TIER.json recorded (what a crash at the end gets)
    try:
        return str(json.load(open(os.path.join(d(e), "checkpoints", "MEMORY_TIER.json")))["step"])
    except Exception:
        return "-"
def status(e):
    p = os.path.join(d(e), "status.json")
    try:  # one JSON object per node and line
        nodes = [json.loads(l) for l in open(p) if l.strip()]
    except Exception:
        return 0, 0
    sent = sum(n.get("replication", {}).get("to_buddy_bytes", 0) for n in nodes)
    taken = sum(n.get("memory_snapshots_taken", 0) for n in nodes)
    return sent, taken
base = statistics.mean(s["step_time_s"] for s in steps(settings[0]))
P = params(settings[0]); W = 2
coll = 3 * 4 * P * (W - 1) / W
print(f"{'memory every':<14}{'step':>9}{'overhead':>10}{'repl MB/s':>11}{'coll MB/s':>11}"
      f"{'ratio':>8}{'snapshots':>11}{'send MB/s':>11}{'restorable':>12}")
for e in settings:
    ss = steps(e)
    t = statistics.mean(s["step_time_s"] for s in ss)
    total = sum(s["step_time_s"] for s in ss)
    sent, taken = status(e)
    rep = sent / total / 1e6 if total > 0 else 0
    cmb = coll / t / 1e6 if t > 0 else 0
    every, _, cap = e.partition("/")
    label = "off" if every == "0" else every
    label += {"": "", "off": " no repl"}.get(cap, f" cap {cap}")
    print(f"{label:<14}{t:>8.4f}s{100 * (t / base - 1):>9.1f}%{rep:>11.2f}{cmb:>11.2f}"
          f"{(rep / cmb if cmb else 0):>8.3f}{taken:>11}{throughput(e):>11.2f}{restorable(e):>12}")
print(f"(P = {P} parameters; collective bytes per rank per step = {coll / 1e6:.2f} MB; "
      "repl MB/s: bytes replicated over the run's step time; send MB/s: the completed "
      "transfers' bytes over their seconds (one transfer may beat the cap out of the bucket's burst; the cap bounds the long-run rate, repl MB/s per daemon); restorable: the newest step "
      f"MEMORY_TIER.json recorded by the end of the {len(steps(settings[0])) + 2} steps)")
PY
