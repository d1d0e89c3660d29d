#!/usr/bin/env bash
# agent.sh - the ftrain node agent. train.sh starts it on every node, before the trainer, each
# as its own step (one srun per node: a failed node can never take the others' agents along)
#   srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE slurm/agent.sh &
# It runs this node's checkpoint daemon (ckptd) and keeps it running: if ckptd dies, the
# trainer notices at its next checkpoint and saves synchronously (loudly) until the agent has
# restarted the daemon (bounded restarts with back-off); the trainer then reconnects.
# SIGTERM/SIGINT (the job ends, is requeued or cancelled) stop ckptd gracefully: it finishes
# the snapshots it holds, unlinks its shared memory and exits; then the agent exits 0.
# Settings (environment): FTRAIN_RUN_DIR (required), FTRAIN_CKPT_ROOT (train.sh passes the
# root the trainer resolved; default: `ftrain paths RUN --get checkpoints`), FTRAIN_CKPTD_ARGS
# (extra ckptd flags, e.g. "--threads 1 --nice 19"), FTRAIN_CKPTD_MAX_RESTARTS (default 3),
# CKPTD_BIN, FTRAIN_BIN.
# With spare nodes (FTRAIN_SPARE_NODES > 0, the job submitted with --no-kill) Slurm keeps the
# job RUNNING when the batch host (FTRAIN_BATCH_HOST) dies, with nobody left to run train.sh:
# the agents on the first two other live nodes (the watchers) then act. They read the batch
# host's heartbeat every FTRAIN_DETECT_PERIOD_S (0.5 s) and declare it dead as train.sh does a
# training node (slurm/detect.sh: silent for FTRAIN_HEARTBEAT_TIMEOUT_S AND its slurmd refuses
# or does not answer; a paused host whose slurmd answers is not dead): the first watcher (the
# second 5 s later, if the first did not; or takes it over from a first one that died before
# it recorded anything: claim_resubmission) records it and submits the job again at once,
# without the dead node (slurm/resubmit.sh), then cancels this job. Without that (FTRAIN_DETECT=0,
# no saved submission, FTRAIN_MAX_RESUBMITS reached, sbatch failed) they requeue the job once
# Slurm took the host out of it (two looks in a row: one look can be wrong), after SlurmdTimeout.
# Without spares (train.sh sets FTRAIN_BATCH_HOST in every job on 2+ nodes with FTRAIN_DETECT=1)
# the watchers do the same: the new job has the same size, the dead node excluded (it needs one
# free node). If they do not act, Slurm ends and requeues the job after SlurmdTimeout as before.
# FTRAIN_REPLICATION=1 (train.sh sets it with spare nodes): buddy replication; each daemon
# listens for peers on this host name (FTRAIN_PEER_HOST, default `hostname`; FTRAIN_PEER_PORT,
# default any free port), publishes FTRAIN_PEER_ADVERTISE (an interface such as ib0, or an
# address: the network replication should use; default the bound address) and streams its
# snapshots to the next live node of the job (a ring, spares included), authenticated with the
# start's secret (RUN/.ckptd-secret, made by train.sh, mode 0600); FTRAIN_REPLICA_MEMORY_GB
# bounds what a daemon holds for others (default 8).
# The live nodes: RUN/.job-nodes, which train.sh rewrites when a node leaves the job (replaced
# by a spare, or a spare lost); the agent reads it every FTRAIN_AGENT_PERIOD_S (default 2) and
# follows it: the daemon's buddy (RUN/ckptd-<node>/buddy-addr, a link to the buddy's peer-addr
# that ckptd re-reads before every connection) and which two nodes watch the batch host.
# The daemon's log is RUN/logs/ckptd-<node>.log (appended; `ftrain paths RUN --node N`).
# Heartbeat: every FTRAIN_HEARTBEAT_PERIOD_S (default 1) the agent bumps a counter in
# RUN/.heartbeats/<node>; train.sh declares a node dead when its counter stops and its slurmd
# does not answer either (slurm/detect.sh), long before Slurm's SlurmdTimeout.
set -uo pipefail

FTRAIN_HOME="${FTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$(pwd)}}"
# shellcheck source=slurm/detect.sh
source "$(dirname "${BASH_SOURCE[0]}")/detect.sh"
# shellcheck source=slurm/resubmit.sh
source "$(dirname "${BASH_SOURCE[0]}")/resubmit.sh"
CKPTD_BIN="${CKPTD_BIN:-${FTRAIN_HOME}/build/bin/ckptd}"
FTRAIN_BIN="${FTRAIN_BIN:-${FTRAIN_HOME}/build/bin/ftrain}"
RUN_DIR="${FTRAIN_RUN_DIR:?agent.sh: set FTRAIN_RUN_DIR}"
CKPTD_ARGS="${FTRAIN_CKPTD_ARGS:-}"
MAX_RESTARTS="${FTRAIN_CKPTD_MAX_RESTARTS:-3}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
export FTRAIN_CKPTD_NODE="${NODE}"

WATCH_PERIOD_S="${FTRAIN_AGENT_PERIOD_S:-2}"  # how often: the job's nodes, the batch host
WATCHER_DELAY_S=5                              # the second watcher acts this much later
BATCH_HOST="${FTRAIN_BATCH_HOST:-}"
# Slurm's view of the batch host is a fallback only with spares (--no-kill: Slurm takes the
# host out of the job and keeps it RUNNING); without, Slurm ends and requeues the job itself.
SLURM_VIEW=0
if [[ "${FTRAIN_SPARE_NODES:-0}" != "0" ]]; then SLURM_VIEW=1; fi
REPLICATION=0
if [[ "${FTRAIN_REPLICATION:-0}" == "1" ]]; then REPLICATION=1; fi

log() { echo "[$(date -u '+%Y-%m-%dT%H:%M:%SZ')] agent.sh ${NODE}: $*"; }
record() {  # record EVENT CAUSE [EXTRA_JSON]: one line of restarts.jsonl (as train.sh's)
  printf '{"time":%s,"job":"%s","restart_count":%s,"event":"%s","cause":"%s"%s}\n' \
    "$(date '+%s.%N')" "${SLURM_JOB_ID:-}" "${SLURM_RESTART_COUNT:-0}" "$1" "$2" "${3:+,$3}" \
    >>"${RESTARTS}"
}

# The layout from the binary (core/run_layout.h), not a copy here: one call (each loads it).
declare -A P=()
paths_out="$("${FTRAIN_BIN}" paths "${RUN_DIR}" --node "${NODE}")" || exit 1
while IFS=$'\t' read -r key value _; do P["${key%"[${NODE}]"}"]="${value}"; done <<<"${paths_out}"
CKPT_ROOT="${FTRAIN_CKPT_ROOT:-${P[checkpoints]}}"
LOG="${P[ckptd_log]}" RESTARTS="${P[restarts]}" JOB_NODES="${P[job_nodes]}" HEARTBEATS="${P[heartbeats]}"
BUDDY_LINK="${P[ckptd_buddy_addr]}" SUBMIT_DIR="${P[submit]}"
[[ -n "${LOG}" && -n "${RESTARTS}" && -n "${JOB_NODES}" && -n "${BUDDY_LINK}" ]] ||
  { log "ftrain paths ${RUN_DIR} --node ${NODE} printed no ckptd_log/restarts/job_nodes/ckptd_buddy_addr"; exit 1; }
mapfile -t JOB_NODELIST < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-${NODE}}")

# ring: the job's live nodes in ring order, from RUN/.job-nodes ("JOBID NODE...", written by
# train.sh) when it is this job's, else the job's node list.
ring=()
read_ring() {
  local job rest=""
  if read -r job rest 2>/dev/null <"${JOB_NODES}" && [[ "${job}" == "${SLURM_JOB_ID:-}" ]]; then
    read -ra ring <<<"${rest}"
  else
    ring=("${JOB_NODELIST[@]}")
  fi
  ((${#ring[@]} > 0))
}

# Points BUDDY_LINK (ckptd's --buddy-file) at the peer-addr of the live node after this one;
# nothing changes when this node is alone or not in the ring.
buddy=""
point_buddy() {
  local i next="" target
  for i in "${!ring[@]}"; do
    [[ "${ring[i]}" == "${NODE}" ]] && next="${ring[$(((i + 1) % ${#ring[@]}))]}"
  done
  [[ -n "${next}" && "${next}" != "${NODE}" && "${next}" != "${buddy}" ]] || return 0
  target="$("${FTRAIN_BIN}" paths "${RUN_DIR}" --node "${next}" --get ckptd_peer_addr)" || return 1
  mkdir -p "$(dirname "${BUDDY_LINK}")" &&
    ln -sfn "${target}" "${BUDDY_LINK}.tmp" && mv -Tf "${BUDDY_LINK}.tmp" "${BUDDY_LINK}" || return 1
  log "buddy replication: snapshots of this node go to ${next}'s daemon${buddy:+ (was ${buddy})}"
  buddy="${next}"
}

# Prints 1 or 2 when this node is one of the first two live nodes other than the batch host
# (the batch-host watchers), nothing otherwise.
watcher_rank() {
  local n k=0
  for n in "${ring[@]}"; do
    [[ "${n}" != "${BATCH_HOST}" ]] || continue
    k=$((k + 1))
    ((k <= 2)) || return 0
    if [[ "${n}" == "${NODE}" ]]; then echo "${k}"; return 0; fi
  done
}

# Is the batch host out of the job? 0: yes; 1: no; 2: cannot tell (slurmctld did not answer).
# The host list is read whole before it is searched: `scontrol ... | grep -q` under pipefail
# reads a scontrol killed by SIGPIPE (grep stopped early) as "gone".
batch_host_left() {
  local nodes hosts
  nodes="$(squeue -h -j "${SLURM_JOB_ID}" -o '%N' 2>/dev/null)" || return 2
  [[ -n "${nodes}" ]] || return 2
  hosts="$(scontrol show hostnames "${nodes}" 2>/dev/null)" || return 2
  [[ -n "${hosts}" ]] || return 2
  if grep -qxF -- "${BATCH_HOST}" <<<"${hosts}"; then return 1; fi
  return 0
}

# The job's restart count as slurmctld has it; fails when it does not answer.
job_restarts() {
  local out
  out="$(scontrol -o show job "${SLURM_JOB_ID}" 2>/dev/null)" || return 1
  [[ "${out}" =~ (^|[[:space:]])Restarts=([0-9]+) ]] || return 1
  echo "${BASH_REMATCH[2]}"
}

# Requeues the job once the batch host is no longer in it (Slurm took it out: --no-kill),
# unless the job was requeued already (its restart count moved on).
requeue_for_batch_host() {  # requeue_for_batch_host WATCHER_RANK
  local restarts
  sleep "$((($1 - 1) * WATCHER_DELAY_S))"
  restarts="$(job_restarts)" || return 1  # slurmctld did not answer: look again later
  [[ "${restarts}" == "${SLURM_RESTART_COUNT:-0}" ]] || return 0
  if ((!requeue_recorded)); then
    log "the batch host ${BATCH_HOST} left job ${SLURM_JOB_ID} (node failure): requeueing the job"
    record step_failed node_failure "\"node\":\"${BATCH_HOST}\",\"batch_host\":true,\"watcher\":\"${NODE}\",\"detected\":$(date '+%s.%N'),\"detected_by\":\"slurm\""
    requeue_recorded=1
  fi
  log "requeueing job ${SLURM_JOB_ID}"
  scontrol requeue "${SLURM_JOB_ID}"
}

# Has this start's resubmission an outcome: a record (resubmitted or not), or the new job's
# marker (written before the record)?
resubmission_done() {
  [[ -e "${SUBMIT_DIR}/replaced-${SLURM_JOB_ID}" ]] ||
    grep -qE "\"job\":\"${SLURM_JOB_ID}\",\"restart_count\":${SLURM_RESTART_COUNT:-0},\"event\":\"(not_)?resubmitted\"" \
      "${RESTARTS}" 2>/dev/null
}

# Claims this start's resubmission: RUN/.submit/claim-JOB.N, an atomic mkdir, holding the
# claimant's node name. Held by the other watcher: wait for its outcome, and take the claim
# over (claim-JOB.N.takeover, atomic too) if the holder is declared dead itself (the same
# two-sign rule) first, or has recorded nothing after CLAIM_WAIT_S (its sbatch is bounded
# by 60 s). Fails when the other watcher has it.
CLAIM_WAIT_S="${FTRAIN_CLAIM_WAIT_S:-90}"
claim_resubmission() {
  local claim="${SUBMIT_DIR}/claim-${SLURM_JOB_ID}.${SLURM_RESTART_COUNT:-0}" by="" deadline saved
  if mkdir "${claim}" 2>/dev/null; then
    echo "${NODE}" >"${claim}/by"
    return 0
  fi
  deadline=$((SECONDS + CLAIM_WAIT_S))
  saved="${detect_fields}"  # check_heartbeats below sets it for the holder
  while ! resubmission_done; do
    [[ -n "${by}" ]] || by="$(cat "${claim}/by" 2>/dev/null)"
    if ((SECONDS >= deadline)) || { [[ -n "${by}" && "${by}" != "${NODE}" && -e "${HEARTBEATS}/${by}" ]] &&
      check_heartbeats "${by}"; }; then
      detect_fields="${saved}"
      mkdir "${claim}.takeover" 2>/dev/null || return 1
      log "the other watcher ${by:-?} claimed job ${SLURM_JOB_ID}'s resubmission and $( ((SECONDS >= deadline)) && echo "recorded nothing in ${CLAIM_WAIT_S} s" || echo "died"): taking it over"
      return 0
    fi
    sleep "${TICK_S}"
  done
  detect_fields="${saved}"
  log "job ${SLURM_JOB_ID} is being submitted again by the other watcher${by:+ (${by})}"
  return 1
}

# The batch host was declared dead (detect.sh: detect_fields): unless the other watcher did,
# record it, submit the job again without it (slurm/resubmit.sh), say so in the job's output,
# point the jobs that wait on this one at the new one, and cancel this job (and so this agent).
# Fails when it did not resubmit: then the Slurm path above remains.
resubmit_for_batch_host() {  # resubmit_for_batch_host WATCHER_RANK
  local new err out_file msg done_n="${FTRAIN_RESUBMITS:-0}" max="${FTRAIN_MAX_RESUBMITS:-3}"
  sleep "$((($1 - 1) * WATCHER_DELAY_S))"
  mkdir -p "${SUBMIT_DIR}" && claim_resubmission || return 1
  record step_failed node_failure "\"node\":\"${BATCH_HOST}\",\"batch_host\":true,\"watcher\":\"${NODE}\",${detect_fields}"
  requeue_recorded=1
  if ((done_n >= max)); then
    log "not submitting job ${SLURM_JOB_ID} again: it is resubmission ${done_n} of FTRAIN_MAX_RESUBMITS=${max}; Slurm requeues it once it marks ${BATCH_HOST} DOWN"
    record not_resubmitted node_failure "\"why\":\"FTRAIN_MAX_RESUBMITS=${max} reached\""
    return 1
  fi
  if ! resubmit_job "${SUBMIT_DIR}" "${BATCH_HOST}" "${SLURM_JOB_ID}" 2>"${SUBMIT_DIR}/.err.$$"; then
    err="$(tail -n 3 "${SUBMIT_DIR}/.err.$$" 2>/dev/null | tr '"\n' "' ")"
    rm -f "${SUBMIT_DIR}/.err.$$"
    log "could not submit job ${SLURM_JOB_ID} again (${err}); Slurm requeues it once it marks ${BATCH_HOST} DOWN"
    record not_resubmitted node_failure "\"why\":\"${err//\\/}\""
    return 1
  fi
  rm -f "${SUBMIT_DIR}/.err.$$"
  new="${sub_new_job}"
  # Should Slurm requeue this job before the scancel below, its next start ends at once (train.sh).
  echo "${new}" >"${SUBMIT_DIR}/replaced-${SLURM_JOB_ID}" 2>/dev/null || true
  record resubmitted node_failure "\"node\":\"${BATCH_HOST}\",\"new_job\":\"${new}\",\"excluded\":\"${BATCH_HOST}\",\"resubmits\":$((done_n + 1)),\"options\":\"${sub_opts[*]//\"/}\""
  out_file="$(sub_field StdOut)"
  # This step's output went to srun on the dead batch host: the job's output file directly.
  msg="the batch host ${BATCH_HOST} died (${detect_fields##*\"evidence\":}): this job continues as job ${new} (sbatch ${sub_opts[*]}; see ${RESTARTS}); cancelling job ${SLURM_JOB_ID}"
  log "${msg}"
  [[ -z "${out_file}" ]] || log "${msg}" >>"${out_file}" 2>/dev/null
  repoint_dependents "${SLURM_JOB_ID}" "${new}"
  timeout 30 scancel "${SLURM_JOB_ID}" || log "WARNING: scancel ${SLURM_JOB_ID} failed: cancel it yourself"
  return 0
}

# Is the batch host declared dead (heartbeat and slurmd probe, detect.sh)? A host whose
# heartbeat file is missing (its agent ended cleanly) is not looked at.
batch_host_dead() {
  [[ "${DETECT}" == "1" && -e "${HEARTBEATS}/${BATCH_HOST}" ]] || return 1
  check_heartbeats "${BATCH_HOST}"
}

# In the background, every WATCH_PERIOD_S: follow the live nodes (the buddy, the watchers) and,
# on a watcher, the batch host: its heartbeat every DETECT_PERIOD_S, Slurm's view of it every
# WATCH_PERIOD_S. A failed look at slurmctld is retried, never the end of it.
requeue_recorded=0
DETECT_PERIOD_S="${FTRAIN_DETECT_PERIOD_S:-0.5}"
# A watcher looks every TICK_S (the shorter period), the others every WATCH_PERIOD_S; the
# ring and Slurm's view every WATCH_PERIOD_S (whole seconds: SECONDS).
TICK_S="$(awk -v a="${WATCH_PERIOD_S}" -v b="${DETECT_PERIOD_S}" 'BEGIN { print (a < b ? a : b) }')"
WATCH_PERIOD_INT="$(awk -v a="${WATCH_PERIOD_S}" 'BEGIN { printf "%d", a }')"
follow_job() {
  local absent=0 which="" left next=0 hb_watch=1
  while :; do
    if ((SECONDS >= next)); then
      next=$((SECONDS + WATCH_PERIOD_INT))
      if read_ring; then
        if ((REPLICATION)); then point_buddy || log "WARNING: could not point ${BUDDY_LINK} at the buddy (retried)"; fi
        which="$(watcher_rank)"
      fi
      if ((SLURM_VIEW)) && [[ -n "${BATCH_HOST}" && -n "${which}" ]]; then
        left=0
        batch_host_left || left=$?
        if ((left == 1)); then absent=0; elif ((left == 0)); then absent=$((absent + 1)); fi
        # confirmed by a second look
        if ((absent >= 2)) && requeue_for_batch_host "${which}"; then return 0; fi
      else
        absent=0
      fi
    fi
    if ((hb_watch)) && [[ -n "${BATCH_HOST}" && -n "${which}" ]] && batch_host_dead; then
      resubmit_for_batch_host "${which}" && return 0
      hb_watch=0  # not resubmitted: Slurm decides (its view here, or its own requeue)
    fi
    if [[ -n "${BATCH_HOST}" && -n "${which}" ]]; then sleep "${TICK_S}"; else sleep "${WATCH_PERIOD_S}"; fi
  done
}

# The heartbeat (see the top): "COUNTER PID JOB", replaced atomically. It stops with the node,
# and with the agent when the node is paused (SIGSTOP) or its processes starve.
HEARTBEAT_PERIOD_S="${FTRAIN_HEARTBEAT_PERIOD_S:-1}"
heartbeat() {
  local seq=0 f="${HEARTBEATS}/${NODE}"
  mkdir -p "${HEARTBEATS}" || { log "WARNING: cannot make ${HEARTBEATS}: no heartbeat"; return 0; }
  while :; do
    seq=$((seq + 1))
    echo "${seq} $$ ${SLURM_JOB_ID:-}" >"${f}.tmp" && mv -f "${f}.tmp" "${f}" 2>/dev/null
    sleep "${HEARTBEAT_PERIOD_S}"
  done
}

peer_args=()
read_ring
if ((REPLICATION)) && point_buddy && [[ -n "${buddy}" ]]; then
  listen_host="${FTRAIN_PEER_HOST:-$(hostname)}"
  # An advertised address must be one the listener is bound to: all of them, by default.
  [[ -n "${FTRAIN_PEER_ADVERTISE:-}" && -z "${FTRAIN_PEER_HOST:-}" ]] && listen_host="*"
  peer_args=(--peer-listen "${listen_host}:${FTRAIN_PEER_PORT:-0}"
    --buddy-file "${BUDDY_LINK}" --job-secret-file "${P[replication_secret]}"
    --replica-memory-gb "${FTRAIN_REPLICA_MEMORY_GB:-8}")
  if [[ -n "${FTRAIN_PEER_ADVERTISE:-}" ]]; then
    peer_args+=(--peer-advertise "${FTRAIN_PEER_ADVERTISE}")
  fi
fi
mkdir -p "$(dirname "${LOG}")"

pid=""
watch_pid=""
hb_pid=""
stopping=0
on_stop() {
  stopping=1
  # The job ends: the batch host's agent ends too, which is no failure.
  if [[ -n "${watch_pid}" ]]; then kill "${watch_pid}" 2>/dev/null || true; fi
  if [[ -n "${pid}" ]]; then kill -TERM "${pid}" 2>/dev/null || true; fi
}
trap on_stop TERM INT
# The heartbeat file goes with the agent: train.sh knows then that it is gone (a dead node's
# agent never says goodbye).
# shellcheck disable=SC2016  # expanded when the trap runs
trap 'kill ${watch_pid} ${hb_pid} 2>/dev/null; wait ${hb_pid} 2>/dev/null; [[ -z "${HEARTBEATS}" ]] || rm -f "${HEARTBEATS}/${NODE}"' EXIT
heartbeat &
hb_pid=$!

if [[ -n "${BATCH_HOST}" ]] || ((REPLICATION)); then
  follow_job &
  watch_pid=$!
  log "following the job's live nodes${BATCH_HOST:+ (the batch host ${BATCH_HOST} is watched by the first two others)} (pid ${watch_pid})"
fi

restarts=0
backoff=1
while :; do
  # shellcheck disable=SC2086  # CKPTD_ARGS is a list of flags
  "${CKPTD_BIN}" --root "${CKPT_ROOT}" --run-dir "${RUN_DIR}" --node "${NODE}" "${peer_args[@]}" ${CKPTD_ARGS} \
    >>"${LOG}" 2>&1 &
  pid=$!
  log "ckptd started (pid ${pid}, log ${LOG})"
  # A signal interrupts `wait` (status 128+N); wait again for the daemon itself, which
  # finishes its snapshots first.
  while :; do
    rc=0
    wait "${pid}" || rc=$?
    kill -0 "${pid}" 2>/dev/null || break
  done
  pid=""
  if ((rc != 0)); then
    # A daemon that died (SIGKILL, OOM) leaves its shared-memory slots in /dev/shm.
    "${CKPTD_BIN}" --cleanup --root "${CKPT_ROOT}" --run-dir "${RUN_DIR}" --node "${NODE}" \
      >>"${LOG}" 2>&1 || true
  fi
  if ((stopping)); then
    log "ckptd stopped (exit ${rc})"
    exit 0
  fi
  if ((rc == 2)); then
    log "ckptd refused to start (exit 2: bad settings, see ${LOG}); not restarting it"
    exit 2
  fi
  if ((restarts >= MAX_RESTARTS)); then
    log "ckptd died (exit ${rc}) ${restarts} times; giving up: the trainer saves synchronously"
    exit 1
  fi
  restarts=$((restarts + 1))
  log "ckptd died (exit ${rc}); restart ${restarts}/${MAX_RESTARTS} in ${backoff} s"
  sleep "${backoff}" &
  wait $! || true
  ((stopping)) && exit 0
  backoff=$((backoff * 2))
done
