#!/usr/bin/env bash
# job_faults_test.sh - the job controller (slurm/train.sh -> `ftrain job`) against stand-in Slurm
# commands that fail the way a busy real cluster's do, without a cluster (FTRAIN_CKPTD=0,
# FTRAIN_PREFLIGHT=0: the controller, the requeue, the records, the lease):
#   failonce:  the ranks stop on request (exit 75) and `scontrol requeue` fails once without
#              acting: retried, verified, requeued exactly once, the job ends 0;
#   neverlands: every `scontrol requeue` fails: the job ends 1 (FAILED, never COMPLETED, so
#              afterok dependents never start), with a failed/requeue_failed record;
#   cancelled: a TERM while slurmctld reports the job cancelled: no requeue (Slurm 22.05 would
#              run a cancelled COMPLETING job again), a stopped/cancelled record;
#   silent:    a TERM while `scontrol show job` gets no answer (slurmctld away, back for the
#              requeue): asked again until FTRAIN_TERM_ASK_S, then requeued as at the time
#              limit (issue 44 hole 3: it used to end 0 as if cancelled, no requeue);
#   silentdown: the same with slurmctld away for good: no requeue sent blind, the job ends 1
#              (FAILED), never 0;
#   silentcancelled: slurmctld answers only after the deadline, and says cancelled: not
#              requeued (22.05 would run it again), exit 0 as any cancelled job (never a requeue);
#   twojobs:   a second job on the same run directory while the first runs (a user's second
#              sbatch): it refuses to train (exit 1, refused/lease_held), never starts a step;
#   tworoots:  a job of another run on the first run's checkpoint root (FTRAIN_CKPT_ROOT shared)
#              while the first runs: it refuses to train (exit 2, refused/ckpt_root_held, both
#              run directories named; issue 44 hole 15), never starts a step;
#   (issue 44: every loop ends)
#   storage:   every step exits 74 (checkpoint storage unreadable at resume): restarted in place
#              after the back-off, then FAILED past FTRAIN_STORAGE_OUTAGE_S, nothing requeued;
#   norecord:  exits 79 with nothing in RUN/rollbacks.jsonl: rank failures, FAILED by the
#              failed-start budget;
#   rollbacks: exits 79, each recorded: restarted in place FTRAIN_MAX_ROLLBACK_RESTARTS times,
#              then a failed start (FAILED at FTRAIN_MAX_FAILED_STARTS=1);
#   nodes:     a node that does not answer the health probe: the requeue is counted in
#              RUN/.node_requeues; with FTRAIN_MAX_NODE_REQUEUES requeues behind it, FAILED.
# Exit 0 pass, 1 fail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN_BIN="${FTRAIN_BIN:-${REPO}/build/bin/ftrain}"
[[ -x "${FTRAIN_BIN}" ]] || { echo "job_faults_test: no ${FTRAIN_BIN}; build first" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-job-faults.XXXXXX")"
BG=()
cleanup() {
  local rc=$?
  ((${#BG[@]} == 0)) || kill "${BG[@]}" 2>/dev/null || true
  if ((rc == 0)); then rm -rf "${WORK}"; else echo "kept ${WORK}" >&2; fi
}
trap cleanup EXIT
log() { echo "[$(date '+%T')] job_faults_test: $*"; }
fail() { echo "job_faults_test: FAIL: $*" >&2; exit 1; }

mkdir -p "${WORK}/bin"
# srun: the training step exits STUB_STEP_RC (after STUB_STEP_S seconds; with STUB_ROLLBACK=1
# after appending a record to RUN/rollbacks.jsonl, as rank 0 does); the health probe exits
# STUB_PROBE_RC; it records its call.
cat >"${WORK}/bin/srun" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"${STUB_STATE}/srun_calls"
[[ " $* " == *" train "* ]] || exit "${STUB_PROBE_RC:-0}"
[[ "${STUB_ROLLBACK:-0}" == 0 ]] ||
  echo '{"time":1,"step":5,"reason":"spike","resumed_from":0}' >>"${FTRAIN_RUN_DIR}/rollbacks.jsonl"
[[ "${STUB_STEP_S:-0}" == 0 ]] || exec sleep "${STUB_STEP_S}"
exit "${STUB_STEP_RC:-0}"
EOF
# scontrol: requeue as REQUEUE_MODE says (the restart count in a file, as slurmctld keeps it);
# show job: that count and STUB_JOB_STATE/STUB_REASON; hostnames.
cat >"${WORK}/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
s="${STUB_STATE}"
case "$*" in
  "show hostnames "*) tr ',' '\n' <<<"$3" ;;
  "requeue "*)
    n=$(($(cat "$s/requeue_calls" 2>/dev/null || echo 0) + 1)); echo "${n}" >"$s/requeue_calls"
    case "${REQUEUE_MODE:-ok}:${n}" in
      fail_once:1 | never:*) echo "slurm_requeue error: Socket timed out on send/recv operation" >&2; exit 1 ;;
    esac
    echo $(($(cat "$s/restarts" 2>/dev/null || echo 0) + 1)) >"$s/restarts" ;;
  "-o show job "*)
    # slurmctld does not answer the first STUB_SHOW_JOB_FAILS calls (-1: never answers).
    n=$(($(cat "$s/show_calls" 2>/dev/null || echo 0) + 1)); echo "${n}" >"$s/show_calls"
    fails="${STUB_SHOW_JOB_FAILS:-0}"
    if ((fails < 0 || n <= fails)); then
      echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
      exit 1
    fi
    echo "JobId=$4 JobState=${STUB_JOB_STATE:-RUNNING} Reason=${STUB_REASON:-None} Restarts=$(cat "$s/restarts" 2>/dev/null || echo 0)" ;;
  *) echo "scontrol stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
chmod +x "${WORK}/bin/"*

# start NAME JOB [ENV=VALUE...]: train.sh as job JOB's first start on node1, run dir WORK/run
# (shared by the scenarios that share NAME's run), in the background; sets PID.
start() {
  local name="$1" job="$2"
  shift 2
  mkdir -p "${WORK}/${name}/state"
  env -i PATH="${WORK}/bin:${PATH}" HOME="${HOME:-/tmp}" STUB_STATE="${WORK}/${name}/state" \
    SLURM_JOB_ID="${job}" SLURM_JOB_NODELIST=node1 SLURMD_NODENAME=node1 FTRAIN_CKPTD=0 \
    FTRAIN_PREFLIGHT=0 FTRAIN_HOME="${REPO}" FTRAIN_BIN="${FTRAIN_BIN}" \
    FTRAIN_CONFIG="${REPO}/configs/tiny.cfg" FTRAIN_RUN_DIR="${WORK}/${RUN:-${name}}/run" \
    FTRAIN_DATA=/nonexistent "$@" bash "${REPO}/slurm/train.sh" >"${WORK}/${name}/out" 2>&1 &
  PID=$!
}
finish() {  # finish NAME: waits for the start; sets RC
  RC=0
  wait "${PID}" || RC=$?
}
records() { cat "${WORK}/$1/run/restarts.jsonl" "${WORK}/$1/run/.records/"*.jsonl 2>/dev/null | sort -u || true; }
count() { cat "${WORK}/$1/state/$2" 2>/dev/null || echo 0; }
steps() {  # steps NAME: how many training steps were launched
  local n
  n=$(grep -c ' train ' "${WORK}/$1/state/srun_calls" 2>/dev/null) || true
  echo "${n:-0}"
}

start failonce 42 STUB_STEP_RC=75 REQUEUE_MODE=fail_once
finish failonce
((RC == 0)) || fail "failonce: exit ${RC}, not 0: $(cat "${WORK}/failonce/out")"
(($(count failonce requeue_calls) == 2 && $(count failonce restarts) == 1)) ||
  fail "failonce: $(count failonce requeue_calls) requeue calls, restart count $(count failonce restarts): not retried once, requeued once"
grep -q '"event":"stopped","cause":"preempted"' <<<"$(records failonce)" || fail "failonce: no stopped record"
grep -q '"event":"failed"' <<<"$(records failonce)" && fail "failonce: a failed record: $(records failonce)"
log "failonce: requeue failed once, retried, verified: requeued exactly once, exit 0"

start neverlands 42 STUB_STEP_RC=75 REQUEUE_MODE=never
finish neverlands
((RC == 1)) || fail "neverlands: exit ${RC}, not 1 (a job whose requeue never landed must not end COMPLETED)"
grep -q "FAILED: could not requeue job 42" "${WORK}/neverlands/out" || fail "neverlands: no FAILED line: $(cat "${WORK}/neverlands/out")"
grep -q '"event":"failed","cause":"requeue_failed"' <<<"$(records neverlands)" ||
  fail "neverlands: no failed/requeue_failed record: $(records neverlands)"
log "neverlands: $(count neverlands requeue_calls) failed requeues -> exit 1 (FAILED), recorded"

start cancelled 42 STUB_STEP_S=60 STUB_JOB_STATE=COMPLETING STUB_REASON=None
until [[ -s "${WORK}/cancelled/state/srun_calls" ]]; do sleep 0.1; done
kill -TERM "${PID}"
finish cancelled
((RC == 0)) || fail "cancelled: exit ${RC}"
(($(count cancelled requeue_calls) == 0)) || fail "cancelled: a cancelled job was requeued"
grep -q '"event":"stopped","cause":"cancelled"' <<<"$(records cancelled)" ||
  fail "cancelled: no stopped/cancelled record: $(records cancelled)"
log "cancelled: TERM of a cancelled job: no requeue, recorded"

# silent*: slurmctld does not answer the TERM's question (asked at 0 and 2 s); at 3 s the job
# is requeued, each try only once slurmctld says the job is not cancelled. The first failed
# `show job` is the start's own question (the job's EndTime, for the stop's lead): unanswered,
# the default lead.
start silent 42 STUB_STEP_S=60 STUB_SHOW_JOB_FAILS=3 FTRAIN_TERM_ASK_S=3
until [[ -s "${WORK}/silent/state/srun_calls" ]]; do sleep 0.1; done
kill -TERM "${PID}"
finish silent
((RC == 0)) || fail "silent: exit ${RC}, not 0 after a verified requeue: $(cat "${WORK}/silent/out")"
(($(count silent restarts) == 1)) || fail "silent: restart count $(count silent restarts): not requeued once"
grep -q "slurmctld did not say within 3 s (FTRAIN_TERM_ASK_S)" "${WORK}/silent/out" ||
  fail "silent: no line saying why it requeued: $(cat "${WORK}/silent/out")"
grep -q '"event":"stopped","cause":"preempted","during":"a TERM slurmctld did not explain"' <<<"$(records silent)" ||
  fail "silent: no stopped/preempted record: $(records silent)"
grep -q '"cause":"cancelled"' <<<"$(records silent)" && fail "silent: taken for a cancel: $(records silent)"
log "silent: TERM while slurmctld did not answer: asked again, then requeued (not ended 0 as cancelled)"

start silentdown 42 STUB_STEP_S=60 STUB_SHOW_JOB_FAILS=-1 FTRAIN_TERM_ASK_S=3
until [[ -s "${WORK}/silentdown/state/srun_calls" ]]; do sleep 0.1; done
kill -TERM "${PID}"
finish silentdown
((RC == 1)) || fail "silentdown: exit ${RC}, not 1 (an unknown answer must never end the job COMPLETED)"
(($(count silentdown requeue_calls) == 0)) || fail "silentdown: a requeue was sent blind"
grep -q '"event":"failed","cause":"requeue_failed"' <<<"$(records silentdown)" ||
  fail "silentdown: no failed/requeue_failed record: $(records silentdown)"
log "silentdown: TERM, slurmctld away for good: no requeue sent blind -> exit 1 (FAILED)"

# silentcancelled: slurmctld answers again only after the deadline, and the job was cancelled:
# never requeued (22.05 would run it again); it ends as a TERM of a cancelled job does (exit 0,
# recorded stopped/cancelled: the requeue's own check of the job's state refused it).
start silentcancelled 42 STUB_STEP_S=60 STUB_SHOW_JOB_FAILS=3 FTRAIN_TERM_ASK_S=3 \
  STUB_JOB_STATE=COMPLETING STUB_REASON=None
until [[ -s "${WORK}/silentcancelled/state/srun_calls" ]]; do sleep 0.1; done
kill -TERM "${PID}"
finish silentcancelled
((RC == 0)) || fail "silentcancelled: exit ${RC}, not 0"
(($(count silentcancelled requeue_calls) == 0)) || fail "silentcancelled: a cancelled job was requeued"
grep -q "was cancelled (JobState=COMPLETING): not requeueing it" "${WORK}/silentcancelled/out" ||
  fail "silentcancelled: no line naming the cancel: $(cat "${WORK}/silentcancelled/out")"
log "silentcancelled: the answer after the deadline said cancelled: not requeued, exit 0"

# twojobs: job 42 trains (a long step, slurmctld says RUNNING); job 43 starts on the same run.
RUN=twojobs start twojobs 42 STUB_STEP_S=60
first="${PID}"
BG+=("${first}")
until [[ -s "${WORK}/twojobs/state/srun_calls" ]]; do sleep 0.1; done
RUN=twojobs start second 43
finish second
((RC == 1)) || fail "twojobs: the second job exited ${RC}, not 1: $(cat "${WORK}/second/out")"
[[ ! -e "${WORK}/second/state/srun_calls" ]] || fail "twojobs: the second job started a step"
grep -q "FAILED: run .* is trained by job 42" "${WORK}/second/out" || fail "twojobs: no refusal naming job 42: $(cat "${WORK}/second/out")"
grep -q '"job":"43",.*"event":"refused","cause":"lease_held"' <<<"$(records twojobs)" ||
  fail "twojobs: no refused/lease_held record: $(records twojobs)"
kill -TERM "${first}" 2>/dev/null || true
wait "${first}" 2>/dev/null || true  # it writes its stop record: before the work dir goes
BG=()
log "twojobs: a second job on a run held by a running one refused to train"

# tworoots: run A (job 42) trains on a shared checkpoint root; run B (job 43) starts on it.
SHARED="${WORK}/shared-ckpt"
start tworoots 42 STUB_STEP_S=60 FTRAIN_CKPT_ROOT="${SHARED}"
first="${PID}"
BG+=("${first}")
until [[ -s "${WORK}/tworoots/state/srun_calls" ]]; do sleep 0.1; done
start otherrun 43 FTRAIN_CKPT_ROOT="${SHARED}"
finish otherrun
((RC == 2)) || fail "tworoots: the other run's job exited ${RC}, not 2: $(cat "${WORK}/otherrun/out")"
[[ ! -e "${WORK}/otherrun/state/srun_calls" ]] || fail "tworoots: the other run started a step"
line="$(grep "FAILED: checkpoint root ${SHARED} is used by another run" "${WORK}/otherrun/out")" ||
  fail "tworoots: no refusal naming the root: $(cat "${WORK}/otherrun/out")"
[[ "${line}" == *"run directory ${WORK}/tworoots/run"* && "${line}" == *"run ${WORK}/otherrun/run "* ]] ||
  fail "tworoots: the refusal does not name both run directories: ${line}"
grep -q '"job":"43",.*"event":"refused","cause":"ckpt_root_held"' <<<"$(records otherrun)" ||
  fail "tworoots: no refused/ckpt_root_held record: $(records otherrun)"
kill -TERM "${first}" 2>/dev/null || true
wait "${first}" 2>/dev/null || true
BG=()
log "tworoots: a job of another run on a checkpoint root held by a running one refused to train (exit 2)"

start storage 42 STUB_STEP_RC=74 FTRAIN_STORAGE_OUTAGE_S=5
finish storage
((RC == 1)) || fail "storage: exit ${RC}, not 1: $(cat "${WORK}/storage/out")"
(($(steps storage) == 2 && $(count storage requeue_calls) == 0)) ||
  fail "storage: $(steps storage) steps, $(count storage requeue_calls) requeues: not restarted once in place"
grep -q "restarting in place in 10 s" "${WORK}/storage/out" || fail "storage: no back-off: $(cat "${WORK}/storage/out")"
grep -q "FAILED: the checkpoint storage could not be read at resume (exit 74)" "${WORK}/storage/out" ||
  fail "storage: no FAILED line: $(cat "${WORK}/storage/out")"
grep -q '"event":"failed","cause":"storage_outage"' <<<"$(records storage)" ||
  fail "storage: no failed/storage_outage record: $(records storage)"
log "storage: exit 74 restarted in place after 10 s, FAILED past FTRAIN_STORAGE_OUTAGE_S=5"

start norecord 42 STUB_STEP_RC=79 FTRAIN_RESTART_BACKOFF_S=0 FTRAIN_MAX_INJOB_RESTARTS=1 \
  FTRAIN_MAX_FAILED_STARTS=1
finish norecord
((RC == 1)) || fail "norecord: exit ${RC}, not 1: $(cat "${WORK}/norecord/out")"
(($(steps norecord) == 2)) || fail "norecord: $(steps norecord) steps, not 2 (one in-job restart)"
grep -q "exited 79 but RUN/rollbacks.jsonl has no new record" "${WORK}/norecord/out" ||
  fail "norecord: a 79 without a record not taken as a rank failure: $(cat "${WORK}/norecord/out")"
grep -q '"event":"failed","cause":"rank_failure_repeated"' <<<"$(records norecord)" ||
  fail "norecord: no failed/rank_failure_repeated record: $(records norecord)"
log "norecord: exits 79 without a rollback record: rank failures, FAILED by the failed-start budget"

start rollbacks 42 STUB_STEP_RC=79 STUB_ROLLBACK=1 FTRAIN_MAX_ROLLBACK_RESTARTS=2 \
  FTRAIN_MAX_FAILED_STARTS=1
finish rollbacks
((RC == 1)) || fail "rollbacks: exit ${RC}, not 1: $(cat "${WORK}/rollbacks/out")"
(($(steps rollbacks) == 3)) || fail "rollbacks: $(steps rollbacks) steps, not 3 (2 rollback restarts)"
grep -q "past FTRAIN_MAX_ROLLBACK_RESTARTS=2" "${WORK}/rollbacks/out" ||
  fail "rollbacks: no budget line: $(cat "${WORK}/rollbacks/out")"
grep -q '"event":"failed","cause":"rollback_repeated"' <<<"$(records rollbacks)" ||
  fail "rollbacks: no failed/rollback_repeated record: $(records rollbacks)"
log "rollbacks: 2 recorded rollbacks restarted in place, the third counted a failed start: FAILED"

start nodes 42 STUB_STEP_RC=1 STUB_PROBE_RC=1 FTRAIN_HEALTH_WAIT_S=1
finish nodes
((RC == 0 && $(count nodes requeue_calls) == 1)) ||
  fail "nodes: exit ${RC}, $(count nodes requeue_calls) requeues: $(cat "${WORK}/nodes/out")"
[[ "$(cat "${WORK}/nodes/run/.node_requeues")" == "none 1" ]] ||
  fail "nodes: RUN/.node_requeues is '$(cat "${WORK}/nodes/run/.node_requeues" 2>&1)', not 'none 1'"
mkdir -p "${WORK}/nodeloop/run"
echo "none 5" >"${WORK}/nodeloop/run/.node_requeues"
start nodeloop 42 STUB_STEP_RC=1 STUB_PROBE_RC=1 FTRAIN_HEALTH_WAIT_S=1 SLURM_RESTART_COUNT=5
finish nodeloop
((RC == 1 && $(count nodeloop requeue_calls) == 0)) ||
  fail "nodeloop: exit ${RC}, $(count nodeloop requeue_calls) requeues: $(cat "${WORK}/nodeloop/out")"
grep -q "FAILED: not requeueing after all: job 42 was requeued 5 times in a row" "${WORK}/nodeloop/out" ||
  fail "nodeloop: no FAILED line: $(cat "${WORK}/nodeloop/out")"
grep -q '"event":"failed","cause":"node_requeues_repeated"' <<<"$(records nodeloop)" ||
  fail "nodeloop: no failed/node_requeues_repeated record: $(records nodeloop)"
log "nodes: a node requeue is counted in RUN/.node_requeues; the sixth in a row ends the job FAILED"
log "PASS"
