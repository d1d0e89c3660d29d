#!/usr/bin/env bash
# The training stall with ckpt.mirror on against off (printed, never pass/fail): trains the
# tiny model (configs/tiny.cfg, 2 ranks, a checkpoint every 5 steps) twice on the licenses
# corpus, once without a mirror and once mirroring to a loopback moto server every 0.2 s, and
# prints each run's checkpoint stall total, the stall p50 and the step time p50 from
# `ftrain report --json`. The mirror runs on its own thread of rank 0: the stall should not
# move; the step time shows what its CPU use costs a 2-core machine.
# usage: bench/s3_mirror_stall.sh [BIN_DIR]   (default: build/bin)
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN="${1:-${BIN}}"
ROOT="${BENCH_ROOT}"
STEPS="${FTRAIN_MIRROR_BENCH_STEPS:-60}"
bench_workdir s3-stall
bench_moto bench
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK}/data" /usr/share/common-licenses >/dev/null

train() {  # train RUN_DIR [EXTRA...]
  local run="$1"
  shift
  "${BIN}/ftrain" launch --nproc 2 --nodes 1 -- train --config "${ROOT}/configs/tiny.cfg" \
    --data.path="${WORK}/data" --run.dir="${run}" --train.steps="${STEPS}" \
    --ckpt.every_steps=5 --ckpt.every_minutes=0 --ckpt.daemon=off "$@" >"${run}.log" 2>&1 ||
    { tail -20 "${run}.log" >&2; exit 1; }
  "${BIN}/ftrain" report "${run}" --json >"${run}.json"
  python3 - "${run}.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
c = j["checkpoints"]
newest = c["tiers"][0]["tiers"] if c["tiers"] else []
name = os.path.basename(sys.argv[1])[:-5]
print(f"{name:<8} stall total {c['stall_total_s']:.3f} s, stall p50 {c['stall_s']['p50']:.4f} s, "
      f"step p50 {j['step_time_s']['p50']:.4f} s, newest checkpoint in {newest}")
PY
}

echo "== s3_mirror_stall: ${STEPS} steps, a checkpoint every 5, 2 ranks, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in 1 2; do
  train "${WORK}/off${round}"
  train "${WORK}/mirror${round}" --ckpt.mirror=s3://bench/run${round} --ckpt.mirror_every_s=0.2
done
