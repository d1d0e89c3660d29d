#!/usr/bin/env bash
#SBATCH --job-name=ftrain
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=ftrain-%j.out
# train.sh - the ftrain sbatch script: pre-flight commcheck, one checkpoint daemon per node
# through the node agent (slurm/agent.sh, an `srun --overlap` step of one task on each node),
# then the trainer ranks through `srun --mpi=pmix`, one per GPU (per CPU slot here). The ranks
# hand their checkpoints to their node's ckptd (asynchronous; synchronous if it is gone).
# Makes the job survive failures:
#   - node failure: Slurm requeues the job (--requeue is set here, whatever the cluster
#     default); every start logs SLURM_RESTART_COUNT and the trainer resumes from the newest
#     complete checkpoint (train.resume=auto);
#   - preemption / time limit: the USR1 warning is forwarded to every rank, they checkpoint at
#     the next step boundary and exit 75; the script then requeues the job itself;
#   - a rank crash with the nodes healthy: the training step is restarted inside the same
#     allocation (bounded retries with backoff), then the job is requeued; after
#     FTRAIN_MAX_FAILED_STARTS (3) such starts in a row with no newer checkpoint in between
#     (a failure every start repeats) the job FAILS instead of requeueing for ever;
#   - USR1 at any other moment (pre-flight, agent start-up, back-off): nothing new to save, so
#     straight to the requeue; every wait on the stop path is bounded (FTRAIN_STOP_TIMEOUT_S);
#   - a configuration or input error (the trainer exits 2, RUN_DIR/.config_error says why):
#     the job FAILS with that message, no restart loop;
#   - a node that does not answer the health probe: left to Slurm's node-failure requeue for
#     FTRAIN_HEALTH_WAIT_S, then the script requeues the job itself;
#   - hot spares (FTRAIN_SPARE_NODES=S, submitted as `sbatch --nodes=N+S --no-kill`): the ranks
#     run on N nodes (srun -m arbitrary, the node of every rank in a host file), S wait with
#     their ckptd running. A training node that fails (Slurm takes it out of the job) is
#     replaced at once inside the allocation: its ranks on a spare, every other rank where it
#     was. No spare left: requeue. The batch host fails: the node agents submit the job again
#     without it within seconds (slurm/resubmit.sh; this start saved its submission in
#     RUN/.submit) and cancel this one; or requeue it once Slurm marks the host DOWN. Without
#     spares they do the same (same size, the dead node excluded: it needs one free node).
#     --no-kill cannot be set here for spare jobs only (#SBATCH lines are fixed, scontrol
#     cannot change it); without it Slurm requeues the job on a node failure as before.
#   - a dead node is noticed by ftrain itself within seconds, whatever Slurm's SlurmdTimeout:
#     the node agents' heartbeats and a probe of the node's slurmd must agree (slurm/detect.sh,
#     FTRAIN_HEARTBEAT_TIMEOUT_S and friends); the step is ended here, the node released from
#     the job where Slurm allows it, and its ranks go to a spare or the job requeues at once
#     excluding it.
# Every restart is recorded in RUN_DIR/restarts.jsonl (cause, lost work). Settings below, all
# overridable from the environment (sbatch --export or the caller's environment).
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
FTRAIN_HOME="${FTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$(pwd)}}"       # the ftrain checkout
FTRAIN_BIN="${FTRAIN_BIN:-${FTRAIN_HOME}/build/bin/ftrain}"
CKPTCTL_BIN="${CKPTCTL_BIN:-${FTRAIN_HOME}/build/bin/ckptctl}"
CONFIG="${FTRAIN_CONFIG:?set FTRAIN_CONFIG to the training config file}"
RUN_DIR="${FTRAIN_RUN_DIR:?set FTRAIN_RUN_DIR to the run directory (shared file system)}"
DATA="${FTRAIN_DATA:?set FTRAIN_DATA to the packed data directory or URL}"
TRAIN_ARGS="${FTRAIN_ARGS:-}"                  # extra --section.key=value overrides
RANKS_PER_NODE="${FTRAIN_RANKS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-1}}"
PREFLIGHT="${FTRAIN_PREFLIGHT:-1}"             # 1: run ftrain commcheck before training
PREFLIGHT_TIMEOUT_S="${FTRAIN_PREFLIGHT_TIMEOUT_S:-120}"
MAX_INJOB_RESTARTS="${FTRAIN_MAX_INJOB_RESTARTS:-2}"
MAX_FAILED_STARTS="${FTRAIN_MAX_FAILED_STARTS:-3}"  # such starts in a row without progress: FAIL
RESTART_BACKOFF_S="${FTRAIN_RESTART_BACKOFF_S:-5}"   # doubles after every in-job restart
HEALTH_TIMEOUT_S="${FTRAIN_HEALTH_TIMEOUT_S:-20}"   # a node that cannot run `true` in this is down
HEALTH_WAIT_S="${FTRAIN_HEALTH_WAIT_S:-300}"  # then wait this long for Slurm to requeue, else requeue
STOP_TIMEOUT_S="${FTRAIN_STOP_TIMEOUT_S:-90}"  # USR1 -> ranks' checkpoint must end within this
CKPTD="${FTRAIN_CKPTD:-1}"                     # 1: start ckptd on every node (slurm/agent.sh)
CKPTD_START_TIMEOUT_S="${FTRAIN_CKPTD_START_TIMEOUT_S:-60}"
SPARE_NODES="${FTRAIN_SPARE_NODES:-0}"         # hot spares: idle nodes that replace a failed one
SPARE_NODELIST="${FTRAIN_SPARE_NODELIST:-}"    # which (default: the last ones, not the batch host)
SPARE_CHECK_S="${FTRAIN_SPARE_CHECK_S:-5}"     # how often a training step looks for lost spares
# Buddy replication of the daemons' snapshots (a replacement node restores from a peer's
# memory): auto = on with spare nodes (without them a node failure requeues the whole job and
# every daemon, so no peer memory survives it), 1 = on, 0 = off.
REPLICATION="${FTRAIN_REPLICATION:-auto}"
# FTRAIN_CKPTD_ARGS (ckptd flags, e.g. "--threads 1 --nice 19") is read by agent.sh.
# FTRAIN_CKPT_ROOT (optional) is passed to the trainer as --ckpt.root; without it ckpt.root
# comes from the config or FTRAIN_ARGS, as the trainer resolves it (see "paths" below).
EXIT_REQUEUE=75                                # ftrain train: checkpointed on request
EXIT_CONFIG=2                                  # ftrain train: configuration or input error

# ---- helpers -------------------------------------------------------------------------------
# shellcheck source=slurm/detect.sh
source "${FTRAIN_HOME}/slurm/detect.sh"
# shellcheck source=slurm/resubmit.sh
source "${FTRAIN_HOME}/slurm/resubmit.sh"
log() { echo "[$(date -u '+%Y-%m-%dT%H:%M:%SZ')] train.sh job ${SLURM_JOB_ID:-?}: $*"; }
now() { date '+%s.%N'; }

# Appends one JSON line to the run's restarts.jsonl. A line whose EXTRA_JSON holds @LOST@ (the
# lost-work fields, computed in the background: lost_begin) waits, with its time, until they
# are known; later lines then wait too unless they are (the file stays in time order).
lost_pid="" lost_file="" queued=()
record() {  # record EVENT CAUSE [EXTRA_JSON]
  local line
  printf -v line '{"time":%s,"job":"%s","restart_count":%s,"event":"%s","cause":"%s"%s}' \
    "$(now)" "${SLURM_JOB_ID:-}" "${SLURM_RESTART_COUNT:-0}" "$1" "$2" "${3:+,$3}"
  queued+=("${line}")
  if [[ -z "${lost_pid}" ]] || ! kill -0 "${lost_pid}" 2>/dev/null; then lost_flush; fi
}

# The lost-work fields of a failure (work_since_checkpoint and last_step_fields: a ckptctl and
# two python starts, 1-2 s) are worked out in the background, off the relaunch's critical path;
# metrics.jsonl's last line is taken now, before a relaunched trainer drops it.
lost_begin() {
  lost_flush
  if [[ -n "${lost_file}" ]]; then rm -f "${lost_file}" "${lost_file}.last"; fi
  lost_file="$(mktemp "${TMPDIR:-/tmp}/ftrain-${SLURM_JOB_ID:-0}-lost.XXXXXX")"
  tail -n 1 "${METRICS}" >"${lost_file}.last" 2>/dev/null || true
  echo "$(work_since_checkpoint "${lost_file}.last")$(last_step_fields "${lost_file}.last")" >"${lost_file}" &
  lost_pid=$!
}

# Writes the waiting records (waits for the lost-work fields when one needs them).
lost_flush() {
  local line lost="0"
  ((${#queued[@]} > 0)) || return 0
  if [[ -n "${lost_pid}" ]]; then
    while kill -0 "${lost_pid}" 2>/dev/null; do wait "${lost_pid}" 2>/dev/null || true; done
    lost="$(cat "${lost_file}" 2>/dev/null)"
    [[ -n "${lost}" ]] || lost="0"
  fi
  for line in "${queued[@]}"; do printf '%s\n' "${line//@LOST@/${lost}}" >>"${RESTARTS}"; done
  queued=()
}

# A start whose rank failures used up the in-job restarts: counts it in RUN/.failed_starts
# ("NEWEST_CHECKPOINT COUNT": the count starts again at 1 whenever a newer checkpoint was
# committed since the last such start) and prints "COUNT NEWEST_CHECKPOINT".
count_failed_start() {
  local file="${FAILED_STARTS}" newest prev="" count=""
  newest="$("${CKPTCTL_BIN}" latest "${CKPT_ROOT}" 2>/dev/null)" || newest="none"
  newest="${newest##*/}"
  read -r prev count 2>/dev/null <"${file}" || true
  if [[ "${prev}" == "${newest}" && "${count}" =~ ^[0-9]+$ ]]; then count=$((count + 1)); else count=1; fi
  { echo "${newest} ${count}" >"${file}.tmp" && mv -f "${file}.tmp" "${file}"; } 2>/dev/null ||
    log "WARNING: cannot write ${file}: failed starts are not counted"
  echo "${count} ${newest}"
}

# Waits S seconds in the background (a USR1 is handled at once, not after the sleep) and
# writes the waiting records meanwhile: a back-off is no relaunch to keep them from.
pause_s() {  # pause_s S
  local pid
  sleep "$1" &
  pid=$!
  lost_flush
  ((stop_requested)) || wait "${pid}" || true
}

# Seconds of training since the newest complete checkpoint: the work a failure now loses
# (METRICS_FILE: a copy of metrics.jsonl's last line).
work_since_checkpoint() {  # work_since_checkpoint [METRICS_FILE]
  local latest last
  latest="$("${CKPTCTL_BIN}" list "${CKPT_ROOT}" --json 2>/dev/null |
    python3 -c 'import json,sys
d=json.load(sys.stdin)
c=[x for x in d["checkpoints"] if x["status"]=="complete"]
print(c[0]["created_unix"] if c else 0)' 2>/dev/null || echo 0)"
  last="$(tail -n 1 "${1:-${METRICS}}" 2>/dev/null |
    python3 -c 'import json,sys
try: print(json.loads(sys.stdin.read())["time"])
except Exception: print(0)' 2>/dev/null || echo 0)"
  awk -v a="${last}" -v b="${latest}" 'BEGIN { d = a - b; if (b == 0 || d < 0) d = 0; printf "%.3f", d }'
}

# ',"last_step":N,"last_step_time":T' of the newest line in metrics.jsonl (nothing if there is
# none): the last sign of life before a failure. A resumed trainer drops the lines after its
# checkpoint, so this record is the only trace of the work that is re-done (ftrain report).
last_step_fields() {  # last_step_fields [METRICS_FILE]
  tail -n 1 "${1:-${METRICS}}" 2>/dev/null | python3 -c 'import json,sys
try:
  d=json.loads(sys.stdin.read())
  print(",\"last_step\":%d,\"last_step_time\":%.3f" % (d["step"], d["time"]))
except Exception: pass' 2>/dev/null || true
}

# Can every node (NODE... given: those) run `true` within HEALTH_TIMEOUT_S?
nodes_healthy() {  # nodes_healthy [NODE...]
  local nodes=(--nodes="${SLURM_NNODES}" --ntasks="${SLURM_NNODES}")
  if (($# > 0)); then
    nodes=(--nodelist="$(IFS=,; echo "$*")" --nodes="$#" --ntasks="$#")
  fi
  timeout "${HEALTH_TIMEOUT_S}" srun --overlap --mpi=none "${nodes[@]}" --ntasks-per-node=1 \
    --kill-on-bad-exit=1 true >/dev/null 2>&1
}

# ---- spare nodes (FTRAIN_SPARE_NODES > 0) ------------------------------------------------------
# train_nodes: where the ranks run; spare_nodes: idle, their ckptd running; rank_hosts[r]: the
# node of rank r, the SLURM_HOSTFILE of `srun -m arbitrary`, so that a spare takes exactly the
# ranks of the node it replaces and every survivor keeps its own (the trainer numbers nodes by
# their lowest rank, so the node groups keep their order too).
train_nodes=()
spare_nodes=()
rank_hosts=()
hostfile=""
replacements=0

# " node1 node3 ": the nodes still in the job; with --no-kill Slurm takes a failed node out of
# the allocation when it marks it DOWN. Empty when slurmctld does not answer (nothing known).
nodes_in_job() {
  local list
  list="$(squeue -h -j "${SLURM_JOB_ID}" -o '%N' 2>/dev/null)" || return 0
  [[ -n "${list}" ]] || return 0
  echo " $(scontrol show hostnames "${list}" | paste -sd' ') "
}

# RUN/.job-nodes, "JOBID NODE...": the job's live nodes (training and spare) in the job's
# order. The node agents follow it (slurm/agent.sh): each daemon replicates to the next live
# node, and the first two live nodes other than the batch host watch it. Replaced atomically.
write_job_nodes() {
  local n live=() tmp="${JOB_NODES}.tmp.$$"
  for n in "${all_nodes[@]}"; do
    if ((SPARE_NODES == 0)) || [[ " ${train_nodes[*]} ${spare_nodes[*]} " == *" ${n} "* ]]; then
      live+=("${n}")
    fi
  done
  if ! { echo "${SLURM_JOB_ID:-} ${live[*]}" >"${tmp}" && mv -f "${tmp}" "${JOB_NODES}"; }; then
    log "WARNING: could not write ${JOB_NODES}: the node agents keep the previous live nodes"
  fi
}

# Drops the spares that are no longer in the job (NOW: nodes_in_job), each recorded; with
# WHEN set, says that it was noticed while the ranks ran.
drop_lost_spares() {  # drop_lost_spares NOW [WHEN]
  local n left=() lost=0
  for n in "${spare_nodes[@]}"; do
    if [[ "$1" == *" ${n} "* ]]; then left+=("${n}"); continue; fi
    log "spare node ${n} is gone${2:+ ($2)}"
    record spare_lost node_failure "\"node\":\"${n}\""
    lost=1
  done
  spare_nodes=("${left[@]}")
  if ((lost)); then
    log "${#spare_nodes[@]} spare(s) left: ${spare_nodes[*]:-none}"
    write_job_nodes
  fi
}

# Sets dead_nodes to the training nodes no longer in the job; drops lost spares (recorded).
find_dead_nodes() {
  local now n
  dead_nodes=()
  now="$(nodes_in_job)"
  [[ -n "${now}" ]] || return 0
  drop_lost_spares "${now}"
  for n in "${train_nodes[@]}"; do
    if [[ "${now}" != *" ${n} "* || " ${declared_dead[*]} " == *" ${n} "* ]]; then dead_nodes+=("${n}"); fi
  done
}

# The training step failed (exit RC; LOST: the lost-work fields; T_DETECT: when): if Slurm took
# training nodes out of the job, give each one's ranks to a spare and return 0 (relaunch now),
# or requeue when no spare is left; return 1 when no node was lost (a rank failure).
replace_failed_nodes() {  # replace_failed_nodes RC LOST T_DETECT
  local rc="$1" lost="$2" t_detect="$3" dead spare i deadline
  find_dead_nodes
  # The training nodes only: an idle spare that does not answer costs nothing yet (a rank
  # failure on healthy training nodes is restarted in the job, whatever the spares' state).
  if ((${#dead_nodes[@]} == 0)) && ! nodes_healthy "${train_nodes[@]}"; then
    log "training step failed (exit ${rc}) and a node does not answer: waiting up to ${HEALTH_WAIT_S} s for Slurm to take it out of the job"
    deadline=$((SECONDS + HEALTH_WAIT_S))
    while ((${#dead_nodes[@]} == 0 && SECONDS < deadline)); do
      sleep 1 &
      wait $! || true
      if ((stop_requested)); then requeue_stopped "the wait for a node failure"; fi
      find_dead_nodes
    done
    if ((${#dead_nodes[@]} == 0)); then
      log "no node was taken out of the job within ${HEALTH_WAIT_S} s: requeueing job ${SLURM_JOB_ID}"
      record step_failed node_failure "\"lost_s\":${lost},\"exit\":${rc}"
      stop_agents
      scontrol requeue "${SLURM_JOB_ID}"
      exit 0
    fi
  fi
  ((${#dead_nodes[@]} > 0)) || return 1
  for dead in "${dead_nodes[@]}"; do
    record step_failed node_failure "\"node\":\"${dead}\",\"lost_s\":${lost},\"exit\":${rc},$(detection_fields "${dead}" "${t_detect}")"
    if ((${#spare_nodes[@]} == 0)); then
      log "training node ${dead} failed (step exit ${rc}) and no spare is left: requeueing job ${SLURM_JOB_ID}"
      ((${#declared_dead[@]} == 0)) || requeue_excluding_dead
      stop_agents
      scontrol requeue "${SLURM_JOB_ID}"
      exit 0
    fi
    spare="${spare_nodes[0]}"
    spare_nodes=("${spare_nodes[@]:1}")
    for i in "${!rank_hosts[@]}"; do [[ "${rank_hosts[i]}" != "${dead}" ]] || rank_hosts[i]="${spare}"; done
    for i in "${!train_nodes[@]}"; do [[ "${train_nodes[i]}" != "${dead}" ]] || train_nodes[i]="${spare}"; done
    replacements=$((replacements + 1))
    log "training node ${dead} failed (step exit ${rc}): its ranks move to spare ${spare} (${#spare_nodes[@]} spare(s) left); relaunching in this allocation"
    record restarted node_failure "\"node\":\"${dead}\",\"spare\":\"${spare}\",\"spares_left\":${#spare_nodes[@]},\"replacement\":${replacements},$(detection_fields "${dead}" "${t_detect}")"
  done
  write_job_nodes  # the agents re-form the ring and pick the batch-host watchers anew
  return 0
}

# Waits for the training step (srun_pid) to end and sets rc to its exit status. A USR1
# interrupts `wait`: then the ranks get STOP_TIMEOUT_S to checkpoint and stop (they must be
# done inside Slurm's warning window). Every second it reads the training nodes' heartbeats
# (slurm/detect.sh): a node declared dead ends the step at once (detect_node says which). With
# spares left, every SPARE_CHECK_S it looks for spares Slurm took out of the job: a dead idle
# spare is reported (and the agents' ring and watchers re-formed) when it dies.
wait_step() {
  local stop_deadline="" tick now watch=() period spare_check=$((SECONDS + SPARE_CHECK_S))
  detect_node=""
  if detecting; then
    watch=("${train_nodes[@]}")
    ((${#watch[@]} > 0)) || mapfile -t watch < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
    hb_reset "${watch[@]}"
  fi
  while kill -0 "${srun_pid}" 2>/dev/null; do
    if ((stop_requested)); then
      [[ -n "${stop_deadline}" ]] || stop_deadline=$((SECONDS + STOP_TIMEOUT_S))
      if ((SECONDS >= stop_deadline)); then
        log "the ranks did not stop within ${STOP_TIMEOUT_S} s of USR1: ending the step"
        kill -TERM "${srun_pid}" 2>/dev/null || true
        sleep 5
        kill -KILL "${srun_pid}" 2>/dev/null || true
      fi
      sleep 1 &
      wait $! || true
      continue
    fi
    local spares=$((SPARE_NODES > 0 && ${#spare_nodes[@]} > 0))
    if ((${#watch[@]} == 0 && !spares)); then
      wait "${srun_pid}" 2>/dev/null || true
      continue
    fi
    period="${SPARE_CHECK_S}"
    ((${#watch[@]} == 0)) || period=0.5  # the heartbeats: no process per look (detect.sh)
    sleep "${period}" &
    tick=$!
    wait -n "${srun_pid}" "${tick}" 2>/dev/null || true  # whichever ends first, or a signal
    kill "${tick}" 2>/dev/null || true
    wait "${tick}" 2>/dev/null || true
    kill -0 "${srun_pid}" 2>/dev/null || break
    if ((${#watch[@]} > 0)) && check_heartbeats "${watch[@]}"; then
      end_training_step
      # Released from the job, Slurm no longer waits for the node (best effort; detect.sh).
      if ((SPARE_NODES > 0 && ${#spare_nodes[@]} > 0)); then release_declared_nodes || true; fi
      break
    fi
    if ((spares && SECONDS >= spare_check)); then
      spare_check=$((SECONDS + SPARE_CHECK_S))
      if now="$(nodes_in_job)" && [[ -n "${now}" ]]; then
        drop_lost_spares "${now}" "while the ranks train"
      fi
    fi
  done
  rc=0
  wait "${srun_pid}" 2>/dev/null || rc=$?
  if ((rc == 0)) && [[ -n "${detect_node}" ]]; then rc=1; fi
  if ((rc != 0 && rc != EXIT_REQUEUE && rc != EXIT_CONFIG)) && ((!stop_requested)) &&
    [[ -z "${detect_node}" && ${#watch[@]} -gt 0 ]]; then
    if detect_after_failure "${watch[@]}" && ((SPARE_NODES > 0 && ${#spare_nodes[@]} > 0)); then
      release_declared_nodes || true
    fi
  fi
}

# ---- paths: the run directory's layout comes from the binary (`ftrain paths`), and the
# checkpoint root is resolved from the arguments the trainer gets, so the daemons write, and
# the lost-work figure reads, where the trainer looks.
ckpt_args=()
if [[ -n "${FTRAIN_CKPT_ROOT:-}" ]]; then ckpt_args+=("--ckpt.root=${FTRAIN_CKPT_ROOT}"); fi
mkdir -p "${RUN_DIR}"
declare -A P=()
paths_error=""
read_paths() {  # read_paths ARGS...: P[key]=path from `ftrain paths RUN_DIR ARGS...`
  local out key value _
  if ! out="$("${FTRAIN_BIN}" paths "${RUN_DIR}" "$@" 2>&1)"; then
    paths_error="${out}"
    return 1
  fi
  while IFS=$'\t' read -r key value _; do P["${key}"]="${value}"; done <<<"${out}"
}
# shellcheck disable=SC2086  # TRAIN_ARGS is a list of overrides
if ! read_paths --config "${CONFIG}" --run.dir="${RUN_DIR}" "${ckpt_args[@]}" ${TRAIN_ARGS}; then
  # The trainer will refuse the same configuration with exit 2 and say why; until then the
  # records go where the run directory's own resolved config (or the default) says.
  echo "train.sh: WARNING: ${paths_error}" >&2
  read_paths || { echo "train.sh: ${paths_error}" >&2; exit 1; }
fi
CKPT_ROOT="${P[checkpoints]}" RESTARTS="${P[restarts]}" METRICS="${P[metrics]}"
LAST_STOP="${P[last_stop]}" CONFIG_ERROR="${P[config_error]}" JOB_NODES="${P[job_nodes]}"
FAILED_STARTS="${P[failed_starts]}"
HEARTBEATS="${P[heartbeats]}"
# A start of a job that its node agents already submitted again (its batch host died; Slurm
# then requeued it too, before they could cancel it): the new job trains, this one ends.
if [[ -n "${SLURM_JOB_ID:-}" && -r "${P[submit]}/replaced-${SLURM_JOB_ID}" ]]; then
  new_job="$(tr -cd '0-9A-Za-z_.-' <"${P[submit]}/replaced-${SLURM_JOB_ID}")"
  log "job ${SLURM_JOB_ID} was submitted again as job ${new_job} when its batch host died: this start of it ends here"
  record superseded replaced "\"new_job\":\"${new_job}\""
  exit 0
fi
# The batch host is watched by the node agents (agent.sh) in every job on more than one node:
# with spares (--no-kill: Slurm never ends such a job for it) and, with ftrain's detection on,
# without (they act before SlurmdTimeout ends the job).
WATCH_BATCH_HOST=0
if [[ "${SPARE_NODES}" != "0" ]] ||
  [[ "${CKPTD}" == "1" && "${DETECT}" == "1" && "${SLURM_NNODES:-1}" =~ ^[0-9]+$ && "${SLURM_NNODES:-1}" -gt 1 ]]; then
  WATCH_BATCH_HOST=1
fi
# The submission, for the node agents to submit the job again if the batch host dies; before
# this script exports anything.
if ((WATCH_BATCH_HOST)) && ! submit_capture "${P[submit]}" "${BASH_SOURCE[0]}"; then
  log "WARNING: could not save the submission in ${P[submit]}: if the batch host dies, Slurm requeues the job after SlurmdTimeout"
fi

# ---- the job -------------------------------------------------------------------------------
restart_count="${SLURM_RESTART_COUNT:-0}"
log "start: restart count ${restart_count}, nodes ${SLURM_JOB_NODELIST:-?} (${SLURM_NNODES:-1}), ${RANKS_PER_NODE} ranks per node"
log "settings: config ${CONFIG}, data ${DATA}, run dir ${RUN_DIR}, ftrain ${FTRAIN_BIN}"
if [[ "${restart_count}" != "0" ]]; then
  cause="$(cat "${LAST_STOP}" 2>/dev/null || echo node_failure)"
  record requeued "${cause}" "\"lost_s\":$(work_since_checkpoint)$(last_step_fields)"
  log "this is a requeued start (cause: ${cause}); resuming from the newest complete checkpoint"
elif [[ -n "${FTRAIN_RESUBMITTED_FROM:-}" ]]; then
  # The node agents of job FTRAIN_RESUBMITTED_FROM submitted this job when its batch host died.
  record requeued node_failure "\"resubmitted_from\":\"${FTRAIN_RESUBMITTED_FROM}\",\"resubmits\":${FTRAIN_RESUBMITS:-1},\"lost_s\":$(work_since_checkpoint)$(last_step_fields)"
  log "this is job ${FTRAIN_RESUBMITTED_FROM} submitted again (its batch host died; resubmission ${FTRAIN_RESUBMITS:-1} of at most ${FTRAIN_MAX_RESUBMITS:-3}); resuming from the newest complete checkpoint"
  # Slurm may have requeued the old job before its agents cancelled it (a short SlurmdTimeout).
  timeout 10 scancel --state=PENDING "${FTRAIN_RESUBMITTED_FROM}" >/dev/null 2>&1 || true
else
  record started initial
  rm -f "${FAILED_STARTS}"  # a new submission: a new budget of failed starts
fi
echo node_failure >"${LAST_STOP}"   # what a start after a silent death assumes

mapfile -t all_nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
if [[ "${SPARE_NODES}" != "0" ]]; then
  batch_host="${SLURMD_NODENAME:-$(hostname -s)}"
  if [[ -n "${SPARE_NODELIST}" ]]; then
    mapfile -t spare_nodes < <(scontrol show hostnames "${SPARE_NODELIST}")
  elif [[ "${SPARE_NODES}" =~ ^[0-9]+$ ]]; then
    for ((i = ${#all_nodes[@]} - 1; i >= 0 && ${#spare_nodes[@]} < SPARE_NODES; i--)); do
      [[ "${all_nodes[i]}" == "${batch_host}" ]] || spare_nodes=("${all_nodes[i]}" "${spare_nodes[@]}")
    done
  fi
  for n in "${all_nodes[@]}"; do
    [[ " ${spare_nodes[*]} " == *" ${n} "* ]] || train_nodes+=("${n}")
  done
  if ! [[ "${SPARE_NODES}" =~ ^[0-9]+$ ]] || ((${#spare_nodes[@]} != SPARE_NODES)) ||
    ((${#train_nodes[@]} + SPARE_NODES != ${#all_nodes[@]} || ${#train_nodes[@]} == 0)); then
    log "FAILED: FTRAIN_SPARE_NODES=${SPARE_NODES} (FTRAIN_SPARE_NODELIST=${SPARE_NODELIST:-unset}) does not fit the job's nodes ${all_nodes[*]}: submit with --nodes=N+S and name spares among them"
    echo config_error >"${LAST_STOP}"
    record failed config_error "\"why\":\"spare nodes\""
    exit "${EXIT_CONFIG}"
  fi
  for n in "${train_nodes[@]}"; do
    for ((i = 0; i < RANKS_PER_NODE; i++)); do rank_hosts+=("${n}"); done
  done
  hostfile="$(mktemp "${TMPDIR:-/tmp}/ftrain-${SLURM_JOB_ID}-hosts.XXXXXX")"
  log "spares: ${#rank_hosts[@]} ranks on ${train_nodes[*]}, spare ${spare_nodes[*]}; a failed training node is replaced in this allocation only if the job was submitted with --no-kill (else Slurm requeues it as without spares)"
fi

srun_pid=""
stop_requested=0
on_usr1() {
  stop_requested=1
  log "USR1 (time limit or preemption): asking every rank to checkpoint and stop"
  if [[ -n "${srun_pid}" ]]; then kill -USR1 "${srun_pid}" 2>/dev/null || true; fi
}
trap on_usr1 USR1

# The node agents: one single-task step per node (agent_pids: node -> its srun here). Never one
# step over all nodes: srun aborts a whole step, --no-kill or not, when a node it lost I/O with
# is reported missing the step (a failed node rebooting while still in the job), and that took
# every agent, the batch host's watchers too (seen after two spare replacements).
declare -A agent_pids=()
AGENT_STEP_NAME="ftrain-agents"
agents_running() {  # is any agent's srun still here?
  local n
  for n in "${!agent_pids[@]}"; do kill -0 "${agent_pids[${n}]}" 2>/dev/null && return 0; done
  return 1
}
signal_agents() {  # signal_agents SIG: to every agent's srun still here
  local n
  for n in "${!agent_pids[@]}"; do kill "-$1" "${agent_pids[${n}]}" 2>/dev/null || true; done
}
stop_agents() {
  lost_flush
  ((${#agent_pids[@]} > 0)) || return 0
  log "stopping the node agents (ckptd finishes what it holds, unlinks its shared memory)"
  local steps=() n i
  # A declared-dead node's agent died with it: its srun would wait for slurmctld to give up.
  for n in "${declared_dead[@]}"; do
    [[ -z "${agent_pids[${n}]:-}" ]] || kill -KILL "${agent_pids[${n}]}" 2>/dev/null || true
  done
  # SIGTERM to the agents themselves (scancel --signal of their step): srun forwards SIGKILL
  # on a SIGTERM of its own, before the daemons can clean up. Its exit status says nothing:
  # Slurm 22.05's scancel --signal of a step signals it and then fails ("Invalid job id
  # specified", 225). So that step's srun only when scancel hung (slurmctld not answering).
  local step name node pid
  while read -r step name node; do
    [[ "${name}" == "${AGENT_STEP_NAME}" ]] || continue
    pid="${agent_pids[${node}]:-}"
    (timeout 30 scancel --signal=TERM "${step}" >/dev/null 2>&1
      (($? != 124)) || [[ -z "${pid}" ]] || kill -TERM "${pid}" 2>/dev/null) &
    steps+=("${step}")
  done < <(squeue -h -s -j "${SLURM_JOB_ID}" -o '%i %j %N' 2>/dev/null)
  ((${#steps[@]} > 0)) || signal_agents TERM
  for ((i = 0; i < 600; i++)); do  # up to 60 s for the daemons to drain
    agents_running || break
    # a dead node in the job: done when every live agent said goodbye
    if ((${#declared_dead[@]} > 0 && i % 5 == 4)) && live_agents_gone; then break; fi
    sleep 0.1
  done
  signal_agents TERM
  for ((i = 0; i < 100; i++)); do  # and 10 s more for the sruns to go; never an unbounded wait
    agents_running || break
    sleep 0.1
  done
  signal_agents KILL
  for n in "${!agent_pids[@]}"; do wait "${agent_pids[${n}]}" 2>/dev/null || true; done
  agent_pids=()
}
start_agent() {  # start_agent NODE: its agent as a step of one task on it
  # --mpi=none: the agents need no PMIx wire-up (and so no PMIx state on the nodes).
  # --ntasks: the job's SLURM_NTASKS would otherwise ask for one agent per rank.
  srun --overlap --mpi=none --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist="$1" \
    --kill-on-bad-exit=0 --job-name="${AGENT_STEP_NAME}" "${FTRAIN_HOME}/slurm/agent.sh" &
  agent_pids[$1]=$!
}
# Starts every node's agent and waits (CKPTD_START_TIMEOUT_S) until every ckptd answers; an
# agent whose step ended at start is started again 1 s later, 3 tries per node.
start_agents() {
  local n deadline
  local -A tries=() retry_at=()
  for n in "${all_nodes[@]}"; do start_agent "${n}"; tries[${n}]=1; done
  deadline=$(($(date +%s) + CKPTD_START_TIMEOUT_S))
  until "${CKPTCTL_BIN}" status "${RUN_DIR}" "${node_args[@]}" >/dev/null 2>&1; do
    for n in "${!agent_pids[@]}"; do
      if [[ -n "${retry_at[${n}]:-}" ]]; then
        (($(date +%s) < retry_at[${n}])) && continue
        unset "retry_at[${n}]"; tries[${n}]=$((tries[${n}] + 1)); start_agent "${n}"
      elif ! kill -0 "${agent_pids[${n}]}" 2>/dev/null; then
        wait "${agent_pids[${n}]}" 2>/dev/null || true
        log "WARNING: the node agent's step on ${n} ended at start (attempt ${tries[${n}]}/3)"
        if ((tries[${n}] < 3)); then retry_at[${n}]=$(($(date +%s) + 1)); else unset "agent_pids[${n}]"; fi
      fi
    done
    if (($(date +%s) >= deadline)) || ((${#agent_pids[@]} == 0)); then
      log "WARNING: ckptd is not answering on every node after $(($(date +%s) - deadline + CKPTD_START_TIMEOUT_S)) s; ranks without a daemon save synchronously"
      "${CKPTCTL_BIN}" status "${RUN_DIR}" "${node_args[@]}" || true
      break
    fi
    sleep 0.2
  done
}
on_exit() {
  stop_agents
  if [[ -n "${hostfile}" ]]; then rm -f "${hostfile}"; fi
  if [[ -n "${lost_file}" ]]; then rm -f "${lost_file}" "${lost_file}.last"; fi
}
trap on_exit EXIT

# Requeue now, with nothing new to save (USR1 outside a training step): the job goes back to
# the queue before the warning window ends and resumes from its newest checkpoint.
requeue_stopped() {  # requeue_stopped WHERE
  log "USR1 arrived during $1: nothing new to checkpoint; requeueing job ${SLURM_JOB_ID}"
  echo preempted >"${LAST_STOP}"
  record stopped preempted "\"during\":\"$1\""
  stop_agents
  scontrol requeue "${SLURM_JOB_ID}"
  exit 0
}

if [[ "${PREFLIGHT}" == "1" ]]; then
  log "pre-flight: ftrain commcheck over all ranks"
  # In the background, so that a USR1 is handled at once rather than after the check. 16M is
  # about one transformer layer's all-gather (configs/small.cfg: 12.6 MB in bf16), large enough
  # for a bus bandwidth figure; the record (RUN/commcheck.json) is what `ftrain report` holds
  # the step's bytes against.
  timeout "${PREFLIGHT_TIMEOUT_S}" srun --mpi=pmix --kill-on-bad-exit=1 \
    --ntasks-per-node="${RANKS_PER_NODE}" "${FTRAIN_BIN}" commcheck --sizes 64K,16M --iters 2 \
    --warmup 0 --record "${P[commcheck]}" &
  preflight_pid=$!
  preflight_rc=0
  wait "${preflight_pid}" || preflight_rc=$?
  if ((stop_requested)); then
    kill -TERM "${preflight_pid}" 2>/dev/null || true
    wait "${preflight_pid}" 2>/dev/null || true
    requeue_stopped "the pre-flight check"
  fi
  # commcheck exits 3 when every collective was correct but rank 0 could not write the record
  # (its error line above gives the OS reason). srun may report a peer that --kill-on-bad-exit
  # ended as it left instead, so a failed check also probes the record's directory from here.
  record_error=""
  if ((preflight_rc != 0)); then
    probe="${P[commcheck]}.probe.$$"
    if record_error="$( (: >"${probe}") 2>&1)"; then
      rm -f "${probe}"
      record_error=""
      if ((preflight_rc == 3)); then record_error="see rank 0's commcheck error line above"; fi
    else
      record_error="${record_error##*: }"  # bash's "line N: FILE: " prefix off: the OS error
    fi
  fi
  if [[ -n "${record_error}" ]]; then
    # The trainer would fail on the same directory.
    log "pre-flight: cannot write ${P[commcheck]}: ${record_error}; not starting the training" \
      "(make the run directory writable, or free space on its file system)"
    record preflight_failed commcheck_record "\"file\":\"${P[commcheck]}\""
    exit 1
  fi
  if ((preflight_rc != 0)); then
    log "pre-flight commcheck FAILED: not starting the training (fix the nodes or the network)"
    record preflight_failed commcheck
    exit 1
  fi
fi

# ---- node agents: one ckptd per node ----------------------------------------------------------
if [[ "${CKPTD}" == "1" ]]; then
  # agent.sh starts each daemon on the checkpoint root the trainer resolved.
  export FTRAIN_RUN_DIR="${RUN_DIR}" FTRAIN_HOME FTRAIN_BIN FTRAIN_CKPT_ROOT="${CKPT_ROOT}"
  if [[ "${REPLICATION}" == "1" || ("${REPLICATION}" == "auto" && "${SPARE_NODES}" != "0") ]]; then
    # A new secret for every start (this start's daemons are the only ones that may talk);
    # created 0600 before any byte goes in, never passed on a command line.
    secret_file="${P[replication_secret]}"
    rm -f "${secret_file}"
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"${secret_file}")
    export FTRAIN_REPLICATION=1
    log "buddy replication on: each node's daemon copies its snapshots to the next node's"
  else
    export FTRAIN_REPLICATION=0
  fi
  node_args=()
  for n in "${all_nodes[@]}"; do node_args+=(--node "${n}"); done
  write_job_nodes  # before the agents start: they read it at once
  if ((SPARE_NODES > 0)); then
    # The agents on two nodes watch the batch host (agent.sh), whose death Slurm ignores in a
    # --no-kill job.
    export FTRAIN_BATCH_HOST="${batch_host}" FTRAIN_SPARE_NODES="${SPARE_NODES}"
  elif ((WATCH_BATCH_HOST)); then
    # Without spares too: the first two other nodes' agents watch the batch host (agent.sh).
    export FTRAIN_BATCH_HOST="${SLURMD_NODENAME:-$(hostname -s)}"
  fi
  start_agents
  log "ckptd: $("${CKPTCTL_BIN}" status "${RUN_DIR}" "${node_args[@]}" --json 2>/dev/null | grep -c '"pid"') of ${#all_nodes[@]} nodes serving"
  ckpt_args+=("--ckpt.daemon=auto")
else
  ckpt_args+=("--ckpt.daemon=off")
fi
if ((stop_requested)); then requeue_stopped "pre-flight or agent start-up"; fi

injob_restarts=0
backoff="${RESTART_BACKOFF_S}"
while :; do
  launch=(srun --ntasks-per-node="${RANKS_PER_NODE}")
  if ((SPARE_NODES > 0)); then
    # Rank r runs on rank_hosts[r] (Slurm would number the nodes by host name).
    printf '%s\n' "${rank_hosts[@]}" >"${hostfile}"
    launch=(env "SLURM_HOSTFILE=${hostfile}" srun --distribution=arbitrary
      --nodes="${#train_nodes[@]}" --ntasks="${#rank_hosts[@]}")
    # Slurm 22.05 may never end the failed step's record (its survivors exited before the
    # node was taken out): it keeps their CPUs, and a new step waits for them forever.
    if ((replacements > 0)); then launch+=(--overlap); fi
    log "launching ${FTRAIN_BIN} train on ${#rank_hosts[@]} ranks: $(paste -sd' ' "${hostfile}")"
  else
    log "launching ${FTRAIN_BIN} train on $((SLURM_NNODES * RANKS_PER_NODE)) ranks"
  fi
  rm -f "${CONFIG_ERROR}"  # the trainer writes it when it exits 2
  # shellcheck disable=SC2086  # TRAIN_ARGS is a list of overrides
  "${launch[@]}" --mpi=pmix --kill-on-bad-exit=1 \
    "${FTRAIN_BIN}" train --config "${CONFIG}" --data.path="${DATA}" --run.dir="${RUN_DIR}" \
    --train.resume=auto "${ckpt_args[@]}" ${TRAIN_ARGS} &
  srun_pid=$!
  # A USR1 that came between the launch and the line above would be lost: forward it now.
  if ((stop_requested)); then kill -USR1 "${srun_pid}" 2>/dev/null || true; fi
  lost_flush  # the previous failure's records, now that the ranks start
  wait_step  # sets rc
  srun_pid=""
  if ((rc == 0)); then
    log "training finished"
    record finished "complete"
    echo "complete" >"${LAST_STOP}"
    exit 0
  fi
  if ((rc == EXIT_REQUEUE)) || ((stop_requested)); then
    log "ranks checkpointed and stopped (exit ${rc}); requeueing job ${SLURM_JOB_ID}"
    echo preempted >"${LAST_STOP}"
    record stopped preempted "\"lost_s\":$(work_since_checkpoint)$(last_step_fields)"
    stop_agents  # before the requeue: Slurm then kills whatever still runs
    scontrol requeue "${SLURM_JOB_ID}"
    exit 0
  fi
  if ((rc == EXIT_CONFIG)) || [[ -s "${CONFIG_ERROR}" ]]; then
    why="$(head -c 2000 "${CONFIG_ERROR}" 2>/dev/null || echo "see the ranks' messages above")"
    log "FAILED: the trainer refused its configuration or input (exit ${rc}): ${why}"
    log "not restarting (a restart cannot fix this); fix the settings and submit again"
    echo config_error >"${LAST_STOP}"
    record failed config_error "\"exit\":${rc}"
    exit "${EXIT_CONFIG}"
  fi
  lost_begin  # the records below get "lost_s":... when it is known (record)
  lost="@LOST@"
  if [[ -n "${detect_node}" ]] && ((SPARE_NODES == 0)); then
    echo node_failure >"${LAST_STOP}"
    record step_failed node_failure "\"node\":\"${detect_node}\",\"lost_s\":${lost},\"exit\":${rc},${detect_fields}"
    requeue_excluding_dead
  fi
  # With spares a lost node is replaced at once; the in-job restart budget is for rank failures.
  if ((SPARE_NODES > 0)) && replace_failed_nodes "${rc}" "${lost}" "$(now)"; then continue; fi
  if ! nodes_healthy "${train_nodes[@]}"; then  # with spares: the training nodes
    log "training step failed (exit ${rc}) and a node does not answer: leaving it to Slurm's node-failure requeue for up to ${HEALTH_WAIT_S} s"
    record step_failed node_failure "\"lost_s\":${lost},\"exit\":${rc}"
    # Slurm marks the node down and requeues the job (and ends this script); if it does not
    # (the node answers Slurm but not the probe), requeue it ourselves.
    pause_s "${HEALTH_WAIT_S}"
    if ((stop_requested)); then requeue_stopped "the wait for a node failure"; fi
    log "Slurm did not requeue within ${HEALTH_WAIT_S} s: requeueing job ${SLURM_JOB_ID}"
    echo node_failure >"${LAST_STOP}"
    stop_agents
    scontrol requeue "${SLURM_JOB_ID}"
    exit 0
  fi
  if ((injob_restarts >= MAX_INJOB_RESTARTS)); then
    read -r failed_starts newest < <(count_failed_start)
    if ((failed_starts >= MAX_FAILED_STARTS)); then
      log "FAILED: the training step failed (exit ${rc}) on healthy nodes in ${failed_starts} starts in a row ($((MAX_INJOB_RESTARTS + 1)) tries each) with no checkpoint newer than ${newest} in between: not requeueing (FTRAIN_MAX_FAILED_STARTS=${MAX_FAILED_STARTS}); find the cause in the ranks' errors above, fix it, then submit again (it resumes from ${newest})"
      echo rank_failure >"${LAST_STOP}"
      record failed rank_failure_repeated "\"lost_s\":${lost},\"exit\":${rc},\"failed_starts\":${failed_starts},\"checkpoint\":\"${newest}\""
      exit 1
    fi
    log "training step failed (exit ${rc}) ${injob_restarts} times with healthy nodes: requeueing (failed start ${failed_starts} of at most ${MAX_FAILED_STARTS} with no newer checkpoint than ${newest})"
    echo rank_failure >"${LAST_STOP}"
    record step_failed rank_failure_requeue "\"lost_s\":${lost},\"exit\":${rc}"
    stop_agents
    scontrol requeue "${SLURM_JOB_ID}"
    exit 0
  fi
  injob_restarts=$((injob_restarts + 1))
  log "training step failed (exit ${rc}) with healthy nodes: in-job restart ${injob_restarts}/${MAX_INJOB_RESTARTS} in ${backoff} s"
  record restarted rank_failure "\"lost_s\":${lost},\"exit\":${rc},\"injob\":${injob_restarts}"
  pause_s "${backoff}"
  if ((stop_requested)); then requeue_stopped "the restart back-off"; fi
  backoff=$((backoff * 2))
done
