#!/usr/bin/env bash
# agent.sh - the ftrain node agent. train.sh starts it as one task per node, before the
# trainer, with
#   srun --overlap --nodes=$SLURM_NNODES --ntasks-per-node=1 slurm/agent.sh &
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
# the agents on the first two other nodes then requeue the job, as Slurm would without spares.
# FTRAIN_REPLICATION=1 (train.sh sets it with spare nodes): buddy replication; each daemon
# listens for peers on this host name (FTRAIN_PEER_HOST, default `hostname`; FTRAIN_PEER_PORT,
# default any free port), publishes FTRAIN_PEER_ADVERTISE (an interface such as ib0, or an
# address: the network replication should use; default the bound address) and
# streams its snapshots to the next node of the job's node list (a ring, spares included),
# authenticated with the start's secret (RUN/.ckptd-secret, made by train.sh, mode 0600);
# FTRAIN_REPLICA_MEMORY_GB bounds what a daemon holds for others (default 8).
# The daemon's log is RUN/logs/ckptd-<node>.log (appended; `ftrain paths RUN --node N`).
set -uo pipefail

FTRAIN_HOME="${FTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$(pwd)}}"
CKPTD_BIN="${CKPTD_BIN:-${FTRAIN_HOME}/build/bin/ckptd}"
FTRAIN_BIN="${FTRAIN_BIN:-${FTRAIN_HOME}/build/bin/ftrain}"
RUN_DIR="${FTRAIN_RUN_DIR:?agent.sh: set FTRAIN_RUN_DIR}"
CKPTD_ARGS="${FTRAIN_CKPTD_ARGS:-}"
MAX_RESTARTS="${FTRAIN_CKPTD_MAX_RESTARTS:-3}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
export FTRAIN_CKPTD_NODE="${NODE}"

WATCH_PERIOD_S=2                 # how often a watcher asks slurmctld for the job's nodes

log() { echo "[$(date -u '+%Y-%m-%dT%H:%M:%SZ')] agent.sh ${NODE}: $*"; }

# The layout from the binary (core/run_layout.h), not a copy here.
paths() { "${FTRAIN_BIN}" paths "${RUN_DIR}" --node "${NODE}" --get "$1"; }
CKPT_ROOT="${FTRAIN_CKPT_ROOT:-$(paths checkpoints)}" || exit 1
LOG="$(paths ckptd_log)" || exit 1
RESTARTS="$(paths restarts)" || exit 1

peer_args=()
if [[ "${FTRAIN_REPLICATION:-0}" == "1" ]]; then
  mapfile -t ring < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
  buddy=""
  for i in "${!ring[@]}"; do
    [[ "${ring[i]}" == "${NODE}" ]] && buddy="${ring[$(((i + 1) % ${#ring[@]}))]}"
  done
  if [[ -n "${buddy}" && "${buddy}" != "${NODE}" ]]; then
    listen_host="${FTRAIN_PEER_HOST:-$(hostname)}"
    # An advertised address must be one the listener is bound to: all of them, by default.
    [[ -n "${FTRAIN_PEER_ADVERTISE:-}" && -z "${FTRAIN_PEER_HOST:-}" ]] && listen_host="*"
    peer_args=(--peer-listen "${listen_host}:${FTRAIN_PEER_PORT:-0}"
      --buddy-file "$("${FTRAIN_BIN}" paths "${RUN_DIR}" --node "${buddy}" --get ckptd_peer_addr)"
      --job-secret-file "$(paths replication_secret)"
      --replica-memory-gb "${FTRAIN_REPLICA_MEMORY_GB:-8}")
    if [[ -n "${FTRAIN_PEER_ADVERTISE:-}" ]]; then
      peer_args+=(--peer-advertise "${FTRAIN_PEER_ADVERTISE}")
    fi
    log "buddy replication: snapshots of this node go to ${buddy}'s daemon"
  fi
fi
mkdir -p "$(dirname "${LOG}")"

# Requeues the job once the batch host is no longer in it (Slurm took it out: --no-kill), unless
# the job was requeued already (its restart count moved on). The second watcher waits longer.
watch_batch_host() {  # watch_batch_host BATCH_HOST DELAY_S
  local host="$1" nodes
  while sleep "${WATCH_PERIOD_S}"; do
    nodes="$(squeue -h -j "${SLURM_JOB_ID}" -o '%N' 2>/dev/null)" || continue  # retried
    [[ -n "${nodes}" ]] || continue
    if scontrol show hostnames "${nodes}" | grep -qx "${host}"; then continue; fi
    sleep "$2"
    [[ "$(scontrol -o show job "${SLURM_JOB_ID}" | grep -o 'Restarts=[0-9]*')" == \
      "Restarts=${SLURM_RESTART_COUNT:-0}" ]] || return 0
    log "the batch host ${host} left job ${SLURM_JOB_ID} (node failure): requeueing the job"
    printf '{"time":%s,"job":"%s","restart_count":%s,"event":"step_failed","cause":"node_failure","node":"%s","batch_host":true,"detected_by":"%s"}\n' \
      "$(date '+%s.%N')" "${SLURM_JOB_ID}" "${SLURM_RESTART_COUNT:-0}" "${host}" "${NODE}" \
      >>"${RESTARTS}"
    scontrol requeue "${SLURM_JOB_ID}" && return 0
  done
}

pid=""
watch_pid=""
stopping=0
on_stop() {
  stopping=1
  if [[ -n "${pid}" ]]; then kill -TERM "${pid}" 2>/dev/null || true; fi
}
trap on_stop TERM INT
trap 'if [[ -n "${watch_pid}" ]]; then kill "${watch_pid}" 2>/dev/null; fi' EXIT

if [[ "${FTRAIN_SPARE_NODES:-0}" != "0" && -n "${FTRAIN_BATCH_HOST:-}" ]]; then
  watchers="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | grep -vx "${FTRAIN_BATCH_HOST}" |
    head -n 2 | grep -nx "${NODE}" | cut -d: -f1 || true)"  # 1, 2 or nothing
  if [[ -n "${watchers}" ]]; then
    watch_batch_host "${FTRAIN_BATCH_HOST}" $(((watchers - 1) * 5)) &
    watch_pid=$!
    log "watching the batch host ${FTRAIN_BATCH_HOST} (pid ${watch_pid})"
  fi
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
