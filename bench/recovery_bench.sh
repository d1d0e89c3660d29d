#!/usr/bin/env bash
# Recovery from a node failure on the local Slurm cluster, measured (printed, never
# pass/fail): `sbatch slurm/train.sh` (tiny model, 2 nodes x 2 ranks, ckptd per node), a node
# crash (`local-cluster.sh fail-node`) mid-run, and the time from the crash to the first new
# optimizer step split into:
#   detection     crash -> slurmctld requeues the job (node declared down)
#   requeue wait  requeue -> the job is RUNNING again (cred_expire, scheduling; the 2-node job
#                 runs on two other nodes of the cluster, needs >= 3 nodes)
#   job start     RUNNING -> the first trainer process is up (train.sh, agents + ckptd,
#                 srun, PMIx wire-up of the ranks)
#   restore       trainer up -> state restored from the newest complete checkpoint (includes
#                 the ranks' rendezvous, model construction and waiting for the daemons)
#   warm-up       restored -> first new optimizer step done
# and the work lost per failure vs the checkpoint interval (steps redone x step time, and
# restarts.jsonl's lost_s), for each interval in INTERVALS (checkpoint every N steps).
# usage: bench/recovery_bench.sh   (local cluster running: slurm/local-cluster.sh start)
#   FTRAIN_RECOVERY_{INTERVALS,FAIL_AT,STEPS} override the defaults below.
#   FTRAIN_BENCH_TIMEOUTS="300 10": run under these SlurmdTimeout / MessageTimeout (Slurm's
#   defaults; `local-cluster.sh timeouts`, put back at exit): detection is then ftrain's own
#   (slurm/detect.sh); "ftrain" is crash -> its detection, "detect" crash -> the requeue.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SLURM_TEST_NAME="recovery_bench"
# shellcheck source=tests/slurm/lib.sh
source "${ROOT}/tests/slurm/lib.sh"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
INTERVALS="${FTRAIN_RECOVERY_INTERVALS:-5 10}"
FAIL_AT="${FTRAIN_RECOVERY_FAIL_AT:-33}"
STEPS="${FTRAIN_RECOVERY_STEPS:-60}"
WORK="$(mktemp -d /tmp/ftrain-recovery-XXXXXX)"
JOB=""
FAILED=""
OLD_TIMEOUTS=""
cleanup() {
  cancel_job "${JOB}"
  # shellcheck disable=SC2086  # two numbers
  [[ -z "${OLD_TIMEOUTS}" ]] || "${LOCAL_CLUSTER}" timeouts ${OLD_TIMEOUTS} >/dev/null || true
  [[ -z "${FAILED}" ]] || "${LOCAL_CLUSTER}" revive-node "${FAILED}" || true
  if [[ -n "${FTRAIN_RECOVERY_KEEP:-}" ]]; then echo "kept ${WORK}" >&2; else rm -rf "${WORK}"; fi
}
trap cleanup EXIT

cluster_require
if [[ -n "${FTRAIN_BENCH_TIMEOUTS:-}" ]]; then
  # shellcheck disable=SC2086  # two numbers
  OLD_TIMEOUTS="$("${LOCAL_CLUSTER}" timeouts ${FTRAIN_BENCH_TIMEOUTS})"
fi
wait_for_nodes_idle 90
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK}/data" /usr/share/common-licenses >/dev/null
export FTRAIN_HOME="${ROOT}" FTRAIN_BIN="${BIN}/ftrain" CKPTCTL_BIN="${BIN}/ckptctl"
export CKPTD_BIN="${BIN}/ckptd" FTRAIN_CONFIG="${ROOT}/configs/tiny.cfg" FTRAIN_DATA="${WORK}/data"
export FTRAIN_RANKS_PER_NODE=2

echo "== recovery_bench: tiny, 2 nodes x 2 ranks, node crash after step ${FAIL_AT}," \
  "SlurmdTimeout=$(config_value SlurmdTimeout) MessageTimeout=$(config_value MessageTimeout), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for every in ${INTERVALS}; do
  run="${WORK}/run-${every}"
  export FTRAIN_ARGS="--train.steps=${STEPS} --ckpt.every_steps=${every} --ckpt.every_minutes=0 --dist.sharding=hybrid_shard"
  export FTRAIN_RUN_DIR="${run}"
  JOB="$(sbatch --parsable --nodes=2 --ntasks-per-node=2 \
    --output="${WORK}/job-${every}-%j.out" --time=10 --export=ALL --chdir="${WORK}" \
    "${ROOT}/slurm/train.sh")"
  wait_for_file_lines "${run}/metrics.jsonl" "${FAIL_AT}" 300
  batch_host="$(job_field "${JOB}" BatchHost)"
  for n in $(job_nodes "${JOB}"); do [[ "${n}" == "${batch_host}" ]] || FAILED="${n}"; done
  # Frozen around the crash: the tiny run must not end in the second the node is failed.
  pgrep -f "^${BIN}/ftrain train .*--run.dir=${run}( |$)" | xargs -r kill -STOP
  t_fail="$(now_s)"
  "${LOCAL_CLUSTER}" fail-node "${FAILED}"
  pgrep -f "^${BIN}/ftrain train .*--run.dir=${run}( |$)" | xargs -r kill -CONT
  wait_for 120 "requeue of job ${JOB}" bash -c \
    "[[ \"\$(scontrol -o show job ${JOB} | grep -o 'Restarts=[0-9]*')\" == Restarts=1 ]]"
  t_requeue="$(now_s)"
  # The requeued job does not need the node (4-node cluster); revive it once it runs (ftrain
  # requeues before Slurm marks the node DOWN, and revive-node waits for that).
  wait_for_job_state "${JOB}" RUNNING 300
  t_running="$(now_s)"
  "${LOCAL_CLUSTER}" revive-node "${FAILED}"
  FAILED=""
  wait_for_job_state "${JOB}" 'COMPLETED|FAILED|CANCELLED|TIMEOUT' 300
  echo "${every} ${t_fail} ${t_requeue} ${t_running}" >>"${WORK}/times.txt"
  cp "${WORK}"/job-"${every}"-*.out "${WORK}/out-${every}.txt"
  JOB=""
  wait_for_nodes_idle 90
  echo "   checkpoint every ${every} steps: done" >&2
done

/usr/bin/python3 - "${WORK}" <<'PY'
import datetime, json, os, re, statistics, sys
work = sys.argv[1]
def ts(line):  # "2026-12-01T01:00:11.067Z ..." -> unix seconds
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    return datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp() if m else None
rows = []
for line in open(os.path.join(work, "times.txt")):
    every, t_fail, t_requeue, t_running = line.split()
    every, t_fail, t_requeue, t_running = int(every), float(t_fail), float(t_requeue), float(t_running)
    out = open(os.path.join(work, f"out-{every}.txt"), errors="replace").read().splitlines()
    # The trainer of the requeued start: the rank lines after train.sh's last "launching".
    launch = max(i for i, l in enumerate(out) if "train.sh job" in l and "launching" in l)
    t_up = min(ts(l) for l in out[launch:] if ts(l) and "[rank " in l)
    restored = [l for l in out[launch:] if "resume: restored step" in l]
    t_restored = max(ts(l) for l in restored)
    resumed = int(re.search(r"restored step (\d+)", restored[0]).group(1))
    metrics = [json.loads(l) for l in open(os.path.join(work, f"run-{every}", "metrics.jsonl"))]
    t_first = min(m["time"] for m in metrics if m["time"] > t_restored)
    steps = [m["step_time_s"] for m in metrics]
    step_t = statistics.median(steps)
    # The last step the first allocation finished (metrics.jsonl was truncated at the resume
    # point, the rank-0 log was not).
    failed_at = max(int(m.group(1)) for l in out if ts(l) and ts(l) < t_running
                    for m in [re.search(r"\[rank 0/\d+\] step (\d+)/", l)] if m)
    recs = [json.loads(l) for l in open(os.path.join(work, f"run-{every}", "restarts.jsonl"))]
    lost = [r.get("lost_s") for r in recs if r["event"] == "requeued"]
    det = [r["detected"] - t_fail for r in recs
           if r["event"] == "step_failed" and r.get("detected_by") == "ftrain" and r["time"] > t_fail]
    rows.append((every, det[0] if det else None, t_requeue - t_fail, t_running - t_requeue, t_up - t_running,
                 t_restored - t_up, t_first - t_restored, t_first - t_fail,
                 failed_at, resumed, step_t, lost[0] if lost else None))
print(f"{'interval':>9}{'ftrain':>8}{'detect':>8}{'requeue':>9}{'start':>7}{'restore':>9}{'warm-up':>9}{'total':>7}"
      f"{'failed@':>9}{'resumed@':>10}{'redone':>8}{'lost_s':>8}")
for r in rows:
    every, fd, d, q, s, rs, w, tot, fa, re_, st, lost = r
    fds = f"{fd:>7.1f}s" if fd is not None else f"{'-':>8}"
    print(f"{every:>6} st{fds}{d:>7.1f}s{q:>8.1f}s{s:>6.1f}s{rs:>8.2f}s{w:>8.2f}s{tot:>6.1f}s"
          f"{fa:>9}{re_:>10}{(fa - re_):>5} st{lost if lost is not None else '-':>7}")
print("ftrain = crash -> ftrain declared the node dead (heartbeats + slurmd probe; '-': Slurm acted "
      "first); detect = crash -> the job was requeued (by ftrain, or by Slurm after SlurmdTimeout)")
print("redone = steps trained again after the restart (on average interval/2; the seed's 25-minute"
      " interval loses ~12.5 min per failure on average); lost_s = what train.sh recorded")
PY
