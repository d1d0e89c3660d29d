#!/usr/bin/env bash
# Recovery from a node failure with and without a hot spare, on the local Slurm cluster
# (printed, never pass/fail). Same model, same crash, three ways back:
#   spare+peer  FTRAIN_SPARE_NODES=1 (3 nodes, --no-kill): the spare takes the dead node's
#               ranks inside the allocation and pulls their state from the buddy's memory
#   spare+disk  the same, but the spare has no room for replicas: those ranks read from disk
#   requeue     no spare: Slurm requeues the whole job, every rank reads from disk
#   batch_host  a spare job (the spare the last node) loses its batch host: the node agents
#               submit the job again without it and cancel it; every rank reads from disk
#   batch_host_ns the same without a spare (2 nodes, a third free): the new job has the same
#               size, the dead node excluded
# split into detection (crash -> the failure is acted on: train.sh's replacement, or Slurm's
# requeue), relaunch (-> the trainer's state is being restored), restore (the slowest rank's
# load, from the resumed record), warm-up (-> first new optimizer step done); and the restore
# bandwidth of peer memory vs disk on the same state. Then the cost of replication to the
# training steps: two uninterrupted spare runs, replication on and off, median step time.
# The ranks are frozen (SIGSTOP) at the crash step until the newest checkpoint is committed
# and replicated, so every case resumes from the same step.
# usage: bench/spare_recovery_bench.sh   (local cluster of >= 3 nodes running; ~5 min)
#   FTRAIN_SPARE_BENCH_ARGS: trainer overrides (default: tiny widened to ~3M parameters so
#   that a rank's state is ~12 MB; the tiny model's 1 MB measures latency, not bandwidth).
#   FTRAIN_BENCH_TIMEOUTS="300 10": run under these SlurmdTimeout / MessageTimeout (Slurm's
#   defaults; `local-cluster.sh timeouts`, put back at exit): detection is then ftrain's own.
#   FTRAIN_SPARE_BENCH_CASES: which cases (default all: spare_peer spare_disk requeue batch_host
#   batch_host_ns steady).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SLURM_TEST_NAME="spare_recovery_bench"
# shellcheck source=tests/slurm/lib.sh
source "${ROOT}/tests/slurm/lib.sh"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
STEPS=30
FAIL_AT=12
ARGS="${FTRAIN_SPARE_BENCH_ARGS:---model.hidden_size=256 --model.intermediate_size=688 --model.num_layers=4}"
WORK="$(mktemp -d /tmp/ftrain-spare-bench-XXXXXX)"
JOB=""
FAILED=""
OLD_TIMEOUTS=""
cleanup() {
  cancel_job "${JOB}"
  # shellcheck disable=SC2086  # two numbers
  [[ -z "${OLD_TIMEOUTS}" ]] || "${LOCAL_CLUSTER}" timeouts ${OLD_TIMEOUTS} >/dev/null || true
  [[ -z "${FAILED}" ]] || "${LOCAL_CLUSTER}" revive-node "${FAILED}" || true
  if [[ -n "${FTRAIN_SPARE_BENCH_KEEP:-}" ]]; then echo "kept ${WORK}" >&2; else rm -rf "${WORK}"; fi
}
trap cleanup EXIT

cluster_require
if [[ -n "${FTRAIN_BENCH_TIMEOUTS:-}" ]]; then
  # shellcheck disable=SC2086  # two numbers
  OLD_TIMEOUTS="$("${LOCAL_CLUSTER}" timeouts ${FTRAIN_BENCH_TIMEOUTS})"
fi
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || { echo "spare_recovery_bench: needs a 3-node cluster" >&2; exit 2; }
wait_for_nodes_idle 90
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK}/data" /usr/share/common-licenses >/dev/null
export FTRAIN_HOME="${ROOT}" FTRAIN_BIN="${BIN}/ftrain" CKPTCTL_BIN="${BIN}/ckptctl"
export CKPTD_BIN="${BIN}/ckptd" FTRAIN_CONFIG="${ROOT}/configs/tiny.cfg" FTRAIN_DATA="${WORK}/data"
export FTRAIN_RANKS_PER_NODE=2 FTRAIN_PREFLIGHT=0
export FTRAIN_ARGS="--train.steps=${STEPS} --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard ${ARGS}"

rank_pids() { pgrep -f "^${BIN}/ftrain train .*--run.dir=$1( |$)" || true; }
settled() {  # settled RUN: nothing in flight, newest checkpoint committed (and replicated)
  local latest
  latest="$("${BIN}/ckptctl" latest "$1/checkpoints" 2>/dev/null)" || return 1
  "${BIN}/ckptctl" status "$1" --json 2>/dev/null | STEP="${latest##*step-}" NEED="$2" \
    python3 -c 'import json,os,sys
step=int(os.environ["STEP"]); ok=True; held=0
for line in sys.stdin:
    j=json.loads(line)
    if not j.get("pid"): continue
    ok = ok and j["snapshots_in_flight"] == 0 and j["queue_depth"] == 0
    held += sum(1 for h in j.get("replication", {}).get("replicas_held", []) if h["step"] == step)
sys.exit(0 if ok and held >= int(os.environ["NEED"]) else 1)'
}

# run_case NAME SPARES REPLICA_GB CRASH(0/1) [REPLICATION auto|0]
run_case() {
  local name="$1" spares="$2" gb="$3" crash="$4" run="${WORK}/$1" need=0 try sargs=()
  export FTRAIN_RUN_DIR="${run}" FTRAIN_SPARE_NODES="${spares}" FTRAIN_REPLICA_MEMORY_GB="${gb}"
  export FTRAIN_REPLICATION="${5:-auto}"
  if ((spares > 0)) && [[ "${name}" == batch_host ]]; then
    unset FTRAIN_SPARE_NODELIST
    sargs=(--nodes=3 --no-kill)
  elif ((spares > 0)); then
    export FTRAIN_SPARE_NODELIST="${nodes[0]}"
    sargs=(--nodes=3 --no-kill)
    [[ "${gb}" == "8" ]] && need=4
  else
    unset FTRAIN_SPARE_NODELIST
    sargs=(--nodes=2)
  fi
  JOB="$(sbatch --parsable "${sargs[@]}" --ntasks-per-node=2 --output="${WORK}/${name}-%j.out" \
    --time=15 --export=ALL --chdir="${WORK}" "${ROOT}/slurm/train.sh")"
  if ((crash)); then
    wait_for_file_lines "${run}/metrics.jsonl" "${FAIL_AT}" 300
    for ((try = 0; ; try++)); do
      rank_pids "${run}" | xargs -r kill -STOP
      poll_until 10 settled "${run}" "${need}" && break
      ((try < 20)) || { echo "never settled" >&2; exit 1; }
      rank_pids "${run}" | xargs -r kill -CONT
      sleep 0.3
    done
    FAILED="$(job_nodes "${JOB}" | grep -vx "$(job_field "${JOB}" BatchHost)" | tail -n 1)"
    [[ "${name}" != batch_host* ]] || FAILED="$(job_field "${JOB}" BatchHost)"
    local t_fail t_requeue=0
    t_fail="$(now_s)"
    "${LOCAL_CLUSTER}" fail-node "${FAILED}"
    rank_pids "${run}" | xargs -r kill -CONT
    if [[ "${name}" == batch_host* ]]; then  # follow the new job
      wait_for 120 "job ${JOB} resubmitted" grep -q '"event":"resubmitted"' "${run}/restarts.jsonl"
      t_requeue="$(now_s)"
      JOB="$(grep '"event":"resubmitted"' "${run}/restarts.jsonl" | sed -E 's/.*"new_job":"([0-9]+)".*/\1/')"
    elif ((spares == 0)); then
      wait_for 120 "requeue of job ${JOB}" bash -c \
        "[[ \"\$(scontrol -o show job ${JOB} | grep -o 'Restarts=[0-9]*')\" == Restarts=1 ]]"
      t_requeue="$(now_s)"
      "${LOCAL_CLUSTER}" revive-node "${FAILED}"
      FAILED=""
    fi
    echo "${name} ${t_fail} ${t_requeue}" >>"${WORK}/times.txt"
  fi
  wait_for_job_state "${JOB}" 'COMPLETED|FAILED|CANCELLED|TIMEOUT' 600
  JOB=""
  if [[ -n "${FAILED}" ]]; then "${LOCAL_CLUSTER}" revive-node "${FAILED}"; FAILED=""; fi
  wait_for_nodes_idle 90
  echo "   ${name}: done" >&2
}

echo "== spare_recovery_bench: tiny ${ARGS}, 2 nodes x 2 ranks (+1 spare), full_shard," \
  "crash after step ${FAIL_AT}, SlurmdTimeout=$(config_value SlurmdTimeout) MessageTimeout=$(config_value MessageTimeout), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
CASES=" ${FTRAIN_SPARE_BENCH_CASES:-spare_peer spare_disk requeue batch_host batch_host_ns steady} "
case_on() { [[ "${CASES}" == *" $1 "* ]]; }
if case_on spare_peer; then run_case spare_peer 1 8 1; fi
if case_on spare_disk; then run_case spare_disk 1 0.000001 1; fi
if case_on requeue; then run_case requeue 0 8 1; fi
if case_on batch_host; then run_case batch_host 1 8 1; fi
if case_on batch_host_ns; then run_case batch_host_ns 0 8 1; fi
if case_on steady; then
  run_case steady_replication 1 8 0
  run_case steady_no_replication 1 8 0 0
fi

/usr/bin/python3 - "${WORK}" <<'PY'
import json, os, statistics, sys
work = sys.argv[1]
def records(name):
    return [json.loads(l) for l in open(os.path.join(work, name, "restarts.jsonl"))]
def metrics(name):
    return [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
print(f"{'case':<14}{'by':>7}{'detect':>8}{'relaunch':>10}{'restore':>9}{'warm-up':>9}{'total':>8}"
      f"{'resumed@':>10}{'from peer':>11}{'restore MB/s':>14}")
for line in open(os.path.join(work, "times.txt")):
    name, t_fail, t_requeue = line.split()
    t_fail, t_requeue = float(t_fail), float(t_requeue)
    recs = records(name)
    after = [r for r in recs if r["time"] > t_fail]
    failed = [r for r in after if r["event"] == "step_failed" and r.get("detected_by") == "ftrain"]
    by = "ftrain" if failed else "slurm"
    if name.startswith("batch_host"):  # relaunch: resubmission, the old job's end, the new job's start
        t_act = failed[0]["detected"] if failed else t_requeue
    elif name.startswith("spare"):
        act = next(r for r in after if r["event"] == "restarted" and r["cause"] == "node_failure")
        t_act = act.get("detected", act["time"])
    else:
        t_act = failed[0]["detected"] if failed else t_requeue
    res = next(r for r in after if r["event"] == "resumed")
    restore = res.get("restore_s", 0.0)
    t_first = min(m["time"] for m in metrics(name) if m["time"] > res["time"])  # its end
    relaunch = res["time"] - restore - t_act
    warm = t_first - res["time"]
    peer_b, peer_s = res.get("bytes_from_peer", 0), res.get("peer_fetch_s", 0)
    # One rank's share of a checkpoint (the resumed one may be rotated away by now; every
    # checkpoint of the run holds the same state).
    root = os.path.dirname(res["dir"])
    newest = max(d for d in os.listdir(root) if d.startswith("step-") and "." not in d)
    state_b = sum(os.path.getsize(os.path.join(root, newest, f))
                  for f in os.listdir(os.path.join(root, newest))) / 4
    bw = f"{peer_b / peer_s / 1e6:.0f} (peer)" if peer_b and peer_s else \
         (f"{state_b / restore / 1e6:.0f} (disk)" if restore else "-")
    print(f"{name:<14}{by:>7}{t_act - t_fail:>7.1f}s{relaunch:>9.1f}s{restore:>8.2f}s{warm:>8.2f}s"
          f"{t_first - t_fail:>7.1f}s{res['step']:>10}{res.get('ranks_from_peer', 0):>6} ranks{bw:>14}")
if os.path.exists(os.path.join(work, "steady_no_replication", "metrics.jsonl")):
    steps = {n: statistics.median(m["step_time_s"] - m.get("ckpt_stall_s", 0) for m in metrics(n)[1:])
             for n in ("steady_replication", "steady_no_replication")}
    on, off = steps["steady_replication"], steps["steady_no_replication"]
    print(f"step time (median, checkpoint stall excluded): replication on {on * 1e3:.1f} ms, "
          f"off {off * 1e3:.1f} ms: {100 * (on / off - 1):+.1f} %")
print("detect: crash -> the node is declared dead (by ftrain: heartbeats + slurmd probe; by "
      "Slurm: it took the node out, or requeued the job); relaunch includes the requeue wait. restore MB/s: peer = bytes fetched / fetch time of the slowest rank; "
      "disk = one rank's share of the checkpoint files / the slowest rank's load")
PY
