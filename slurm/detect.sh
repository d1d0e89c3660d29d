#!/usr/bin/env bash
# detect.sh - ftrain's own node-failure detection, sourced by slurm/train.sh (it runs nothing;
# the node agents, slurm/agent.sh, use the same two-sign rule on the batch host).
# Slurm marks a dead node DOWN only after SlurmdTimeout (300 s by default), and until then the
# training step, the job's end and a requeue all wait for it. ftrain does not wait:
#   - every node agent (slurm/agent.sh) bumps a counter in RUN/.heartbeats/<node> every
#     FTRAIN_HEARTBEAT_PERIOD_S (1 s); train.sh reads the training nodes' counters every second
#     while the ranks run;
#   - a node whose counter has not moved for FTRAIN_HEARTBEAT_TIMEOUT_S (3 s) is probed: a TCP
#     connection to its slurmd (NodeAddr:Port from slurmctld), FTRAIN_PROBE_TIMEOUT_S (2 s);
#   - dead = both signs agree: the heartbeat is silent AND the slurmd port refuses or does not
#     answer. A node that is only slow or paused (SIGSTOP, a swap storm) still completes the TCP
#     handshake in its kernel, so it is not dead; it is declared lost only after
#     FTRAIN_HUNG_AFTER_S (60 s) of silence, when a one-task `srun --overlap` to it (its slurmd
#     must answer) fails too. One late heartbeat restarts nothing.
# A declared node's training step is ended here (scancel of the step, then srun), and the node
# is released from the job where Slurm lets the owner do so (scontrol update NodeList=), so
# that nothing of Slurm's waits for it any more. FTRAIN_DETECT=0 turns all of this off (Slurm's
# SlurmdTimeout decides, as before). Needs the node agents (FTRAIN_CKPTD=1).
# Uses from train.sh: log, record, stop_agents, SLURM_JOB_ID, AGENT_STEP_NAME, srun_pid, CKPTD,
# agent_pids, HEARTBEATS.
# shellcheck disable=SC2154  # those come from train.sh

DETECT="${FTRAIN_DETECT:-1}"
HEARTBEAT_TIMEOUT_S="${FTRAIN_HEARTBEAT_TIMEOUT_S:-3}"
PROBE_TIMEOUT_S="${FTRAIN_PROBE_TIMEOUT_S:-2}"
HUNG_AFTER_S="${FTRAIN_HUNG_AFTER_S:-60}"
NORESPOND_WAIT_S="${FTRAIN_NORESPOND_WAIT_S:-30}"  # requeue: wait for Slurm to flag the node

# Thresholds in microseconds (fractions of a second allowed in the settings): the per-second
# look at every node's heartbeat then needs no process but this shell (64 nodes, every 0.5 s).
us_of() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000000 }'; }
HB_TIMEOUT_US="$(us_of "${HEARTBEAT_TIMEOUT_S}")"
HUNG_AFTER_US="$(us_of "${HUNG_AFTER_S}")"
declare -A hb_value=() hb_seen=() hb_noted=() slurmd_addr_of=()
declared_dead=()   # nodes this start declared dead (Slurm may not know yet)
detect_node="" detect_time="" detect_fields=""

# Every training node counts as just heard from (a new step: its agents ran all along).
hb_reset() {  # hb_reset NODE...
  local n
  for n in "$@"; do hb_seen["${n}"]="${EPOCHREALTIME/./}"; hb_noted["${n}"]=""; done
}

# Sets hb_silent_us (and hb_silent, in seconds with one decimal) to the time since NODE's
# counter last moved (a change of any kind is life). Not in $(...): it keeps its state here.
hb_silent=0 hb_silent_us=0
hb_silence() {  # hb_silence NODE
  local n="$1" v="" now="${EPOCHREALTIME/./}"
  read -r v 2>/dev/null <"${HEARTBEATS}/${n}" || v=""
  if [[ -z "${hb_seen[${n}]:-}" || "${v}" != "${hb_value[${n}]:-}" ]]; then
    hb_value["${n}"]="${v}"
    hb_seen["${n}"]="${now}"
    hb_noted["${n}"]=""  # alive again: a later silence is noted anew
  fi
  hb_silent_us=$((now - hb_seen[${n}]))
  printf -v hb_silent '%d.%d' $((hb_silent_us / 1000000)) $((hb_silent_us % 1000000 / 100000))
}

# "ADDR PORT" of NODE's slurmd, as slurmctld has it (cached).
slurmd_addr() {  # slurmd_addr NODE
  local n="$1" out addr port
  if [[ -z "${slurmd_addr_of[${n}]:-}" ]]; then
    out="$(scontrol -o show node "${n}" 2>/dev/null)" || return 1
    [[ "${out}" =~ (^|[[:space:]])NodeAddr=([^[:space:]]+) ]] || return 1
    addr="${BASH_REMATCH[2]}"
    if [[ "${out}" =~ (^|[[:space:]])Port=([0-9]+) ]] && ((BASH_REMATCH[2] > 0)); then
      port="${BASH_REMATCH[2]}"
    else
      port="$(scontrol show config 2>/dev/null | awk '$1 == "SlurmdPort" {print $3; exit}')"
    fi
    slurmd_addr_of["${n}"]="${addr} ${port:-6818}"
  fi
  echo "${slurmd_addr_of[${n}]}"
}

# Does NODE's slurmd accept a TCP connection? Prints open, refused or timeout (or unknown).
# A timeout is tried once more (a loaded prober can be slow too): both must time out.
probe_slurmd_tcp() {  # probe_slurmd_tcp NODE
  local hp rc try
  hp="$(slurmd_addr "$1")" || { echo unknown; return 0; }
  for try in 1 2; do
    rc=0
    # shellcheck disable=SC2016  # expanded by the inner bash
    timeout "${PROBE_TIMEOUT_S}" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${hp% *}" "${hp#* }" 2>/dev/null || rc=$?
    ((rc == 124 && try == 1)) || break
  done
  case "${rc}" in 0) echo open ;; 124) echo timeout ;; *) echo refused ;; esac
}

# Does NODE's slurmd run a task for this job within FTRAIN_PROBE_TIMEOUT_S (+ srun's start)?
probe_slurmd_step() {  # probe_slurmd_step NODE
  # -k: srun handles SIGTERM by cancelling the step and waiting for the tasks: never here.
  timeout -k 1 "$((PROBE_TIMEOUT_S + 3))" srun --overlap --mpi=none --nodelist="$1" --nodes=1 \
    --ntasks=1 --quiet --job-name=ftrain-probe true >/dev/null 2>&1
}

# Looks at the heartbeats of NODE... once: sets detect_node (and the evidence in
# detect_fields) for the first node both signs declare dead or hung; returns 0 then.
check_heartbeats() {  # check_heartbeats NODE...
  local n silent tcp t0
  for n in "$@"; do
    hb_silence "${n}"
    silent="${hb_silent}"
    ((hb_silent_us >= HB_TIMEOUT_US)) || continue
    t0="${EPOCHREALTIME}"
    tcp="$(probe_slurmd_tcp "${n}")"
    if [[ "${tcp}" == refused || "${tcp}" == timeout ]]; then
      declare_dead "${n}" "${silent}" "${tcp}" "dead" "${t0}"
      return 0
    fi
    if ((hb_silent_us >= HUNG_AFTER_US)) && ! probe_slurmd_step "${n}"; then
      declare_dead "${n}" "${silent}" "${tcp}" "hung" "${t0}"
      return 0
    fi
    if [[ -z "${hb_noted[${n}]:-}" ]]; then
      hb_noted["${n}"]=1
      log "node ${n}: heartbeat silent ${silent} s but its slurmd answers (${tcp}): slow or paused, not dead; declared lost after ${HUNG_AFTER_S} s of silence if its slurmd stops answering too"
      record heartbeat_late none "\"node\":\"${n}\",\"silent_s\":${silent},\"slurmd\":\"${tcp}\""
    fi
  done
  return 1
}

declare_dead() {  # declare_dead NODE SILENT_S TCP VERDICT PROBE_START
  local probe_s
  probe_s="$(awk -v a="$5" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.2f", b - a }')"
  detect_node="$1"
  detect_time="${EPOCHREALTIME}"
  declared_dead+=("$1")
  local why
  why="heartbeat silent $2 s (limit ${HEARTBEAT_TIMEOUT_S} s); slurmd $(slurmd_addr "$1" | tr ' ' ':') ${3}"
  [[ "$4" == dead ]] || why+="; a task on it did not start within $((PROBE_TIMEOUT_S + 3)) s (silent over ${HUNG_AFTER_S} s)"
  detect_fields="\"detected\":${detect_time},\"detected_by\":\"ftrain\",\"verdict\":\"$4\",\"heartbeat_silent_s\":$2,\"slurmd\":\"$3\",\"probe_s\":${probe_s},\"evidence\":\"${why}\""
  log "node $1 declared ${4}: ${why}"
}

# The job's steps other than the agents', the batch script and the probes (the training step).
training_steps() {
  squeue -h -s -j "${SLURM_JOB_ID}" -o '%i %j' 2>/dev/null |
    awk -v a="${AGENT_STEP_NAME}" '$1 !~ /\.(batch|extern)$/ && $2 != a && $2 != "ftrain-probe" {print $1}'
}

# Ends the training step now, without waiting for Slurm to give up on the dead node: the
# tasks on the live nodes are killed (scancel of the step), then srun itself.
end_training_step() {
  local s i t0="${EPOCHREALTIME}"
  # In the background: scancel answers only once slurmctld gave up on the dead node
  # (MessageTimeout + 1 s, measured), while the live nodes' tasks die at once.
  for s in $(training_steps); do
    (timeout 30 scancel --signal=KILL "${s}" >/dev/null 2>&1 &)
  done
  for ((i = 0; i < 5; i++)); do  # the live tasks die; srun itself waits for the dead node
    kill -0 "${srun_pid}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "${srun_pid}" 2>/dev/null || true
  log "training step ended ($(awk -v a="${t0}" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }') s)"
}

# Takes the declared nodes out of the job (the owner may shrink a running job:
# `scontrol update JobId=J NodeList=`), so that no step, the job's end or a requeue waits for
# them; updates this script's view of the allocation. Fails when Slurm refuses.
release_declared_nodes() {
  local list=() keep=() n hosts out
  mapfile -t list < <(scontrol show hostnames "$(squeue -h -j "${SLURM_JOB_ID}" -o '%N' 2>/dev/null)" 2>/dev/null)
  for n in "${list[@]}"; do [[ " ${declared_dead[*]} " == *" ${n} "* ]] || keep+=("${n}"); done
  ((${#keep[@]} < ${#list[@]} && ${#keep[@]} > 0)) || return 1
  hosts="$(IFS=,; echo "${keep[*]}")"
  # In a scratch directory: scontrol may write slurm_job_J_resize.{sh,csh} where it runs.
  if ! out="$(cd "${TMPDIR:-/tmp}" && timeout 15 scontrol update JobId="${SLURM_JOB_ID}" NodeList="${hosts}" 2>&1)"; then
    log "could not release ${declared_dead[*]} from job ${SLURM_JOB_ID} (${out:-timeout}): Slurm waits for it until SlurmdTimeout"
    return 1
  fi
  rm -f "${TMPDIR:-/tmp}/slurm_job_${SLURM_JOB_ID}_resize."{sh,csh}
  hosts="$(scontrol show hostlist "${hosts}")"
  export SLURM_JOB_NODELIST="${hosts}" SLURM_NODELIST="${hosts}"
  export SLURM_JOB_NUM_NODES="${#keep[@]}" SLURM_NNODES="${#keep[@]}"
  log "released ${declared_dead[*]} from job ${SLURM_JOB_ID}: it now holds ${hosts}"
}

# After a failed step nobody declared: a node whose slurmd refuses or does not answer may have
# died a moment ago (its peers' collectives broke at once): give its heartbeat the time to
# confirm it (FTRAIN_HEARTBEAT_TIMEOUT_S + 1). Returns 0 when a node is declared dead.
detect_after_failure() {  # detect_after_failure NODE...
  local n suspects=() deadline
  for n in "$@"; do
    [[ "$(probe_slurmd_tcp "${n}")" == open ]] || suspects+=("${n}")
  done
  ((${#suspects[@]} > 0)) || return 1
  log "training step failed and the slurmd of ${suspects[*]} does not answer: confirming by heartbeat"
  deadline=$((SECONDS + HEARTBEAT_TIMEOUT_S + 2))
  while ((SECONDS < deadline)); do
    check_heartbeats "${suspects[@]}" && return 0
    sleep 0.5
  done
  return 1
}

# How long the requeue must wait for slurmctld to flag the released node not responding (the
# scheduler skips such nodes): the flag comes ~MessageTimeout + 2 s after the release (+3 s
# of margin here), and a requeued job becomes eligible cred_expire + 1 s after the requeue
# (Slurm's default: 121 s), so only the difference, at most FTRAIN_NORESPOND_WAIT_S.
norespond_wait_s() {
  scontrol show config 2>/dev/null | awk -v cap="${NORESPOND_WAIT_S}" '
    $1 == "MessageTimeout" { msg = $3 }
    $1 == "AuthInfo" && match($0, /cred_expire=[0-9]+/) { cred = substr($0, RSTART + 12, RLENGTH - 12) }
    END { if (msg == "") msg = 10; if (cred == "") cred = 120
          w = msg + 5 - (cred + 1); if (w < 0) w = 0; if (w > cap) w = cap; print int(w) }'
}

# The declared nodes Slurm does not see responding now (state flagged '*', down, drained,
# failing or unknown), comma-separated.
still_dead_nodes() {
  local n st out=()
  for n in "${declared_dead[@]}"; do
    st="$(sinfo -h -N -n "${n}" -o '%t' 2>/dev/null | head -n 1)"
    case "${st}" in
      idle | mix | alloc | comp | resv | plnd) log "node ${n} is ${st} again: not excluded" >&2 ;;
      *) out+=("${n}") ;;
    esac
  done
  (IFS=,; echo "${out[*]}")
}

# Requeue without a spare: release the dead node (else the requeued job waits in COMPLETING
# for it), wait until slurmctld flags it not responding (the scheduler then skips it), requeue,
# and exclude it from the job (ExcNodeList, settable while the job is pending).
requeue_excluding_dead() {
  local n deadline released=0 dead out
  dead="$(IFS=,; echo "${declared_dead[*]}")"
  if release_declared_nodes; then released=1; fi
  deadline=$((SECONDS + $(norespond_wait_s)))
  for n in "${declared_dead[@]}"; do
    while [[ "$(sinfo -h -N -n "${n}" -o '%t' 2>/dev/null | head -n 1)" != *'*' ]] &&
      ((SECONDS < deadline)); do
      sleep 0.5
    done
  done
  log "requeueing job ${SLURM_JOB_ID} excluding ${dead} (released: ${released}; Slurm sees: $(sinfo -h -N -n "${dead}" -o '%N=%t' 2>/dev/null | paste -sd' '))"
  record requeue_excluding node_failure "\"nodes\":\"${dead}\",\"released\":${released}"
  stop_agents
  trap '' TERM  # the requeue ends this script after KillWait: set the exclusion first
  scontrol requeue "${SLURM_JOB_ID}"
  # Slurm 22.05 gives a resized job a new accounting record and refuses every later update
  # until slurmdbd has indexed it ("the DB index is being set", 5 s of retries): without
  # slurmdbd that never happens, so do not hold the requeue up for it.
  if ((released)) && [[ "$(scontrol show config 2>/dev/null | awk '$1 == "AccountingStorageType" {print $3}')" != *slurmdbd* ]]; then
    log "not setting ExcNodeList=${dead}: Slurm refuses updates of a resized job without slurmdbd; the scheduler skips the node while Slurm flags it not responding"
    exit 0
  fi
  # Exclude only what is still dead: a node declared earlier in this start (one a spare
  # replaced) that Slurm sees responding again is back (otherwise a job with few nodes to
  # spare is left unschedulable, BadConstraints), and earlier exclusions are not carried over.
  dead="$(still_dead_nodes)"
  [[ -n "${dead}" ]] || exit 0
  if ! out="$(timeout 10 scontrol update JobId="${SLURM_JOB_ID}" ExcNodeList="${dead}" 2>&1)"; then
    log "could not set ExcNodeList=${dead} on the requeued job (${out:-timeout}); the scheduler skips it while Slurm flags it not responding"
  fi
  exit 0
}

# The detection fields of a record about NODE: ftrain's evidence when it declared NODE, else
# when Slurm's view was read (Slurm took the node out of the job).
detection_fields() {  # detection_fields NODE T_SLURM
  if [[ "$1" == "${detect_node}" && -n "${detect_fields}" ]]; then
    echo "${detect_fields}"
  else
    echo "\"detected\":$2,\"detected_by\":\"slurm\""
  fi
}

# Is detection on for this start? (It needs the agents' heartbeats.)
detecting() { [[ "${DETECT}" == "1" && "${CKPTD}" == "1" && ${#agent_pids[@]} -gt 0 ]]; }

# Have the agents of every node but the declared ones exited? (An agent removes its heartbeat
# file when it ends.)
live_agents_gone() {
  local n
  for n in "${all_nodes[@]}"; do
    [[ " ${declared_dead[*]} " == *" ${n} "* ]] && continue
    [[ ! -e "${HEARTBEATS}/${n}" ]] || return 1
  done
}
