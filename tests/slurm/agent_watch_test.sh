#!/usr/bin/env bash
# agent_watch_test.sh - the node agent's follower (`ftrain agent`, through slurm/agent.sh) without a
# cluster: it runs with stand-ins for squeue, scontrol, sbatch, scancel and ckptd on PATH,
# looking every 0.02 s instead of 2 s. The batch host host0001's watchers are chosen apart from
# it (src/orch/agent_policy.h): in the 600-node job, host0201 (first) and host0400 (second).
# Records are read merged (restarts.jsonl and the per-host spools, records/restarts.h):
#   sigpipe: a 600-node job whose host list scontrol writes in two pieces: `scontrol | grep -q`
#            under pipefail read the SIGPIPE of the second piece as "the batch host left" and
#            requeued a healthy job; nothing may be requeued;
#   blip:    one look at the job lacks the batch host, the next has it again: not confirmed
#            by a second look, so nothing may be requeued;
#   hiccup:  the batch host left for good, and `scontrol show job` fails twice first: the
#            watcher must keep looking (it used to end for good) and requeue exactly once;
#   ring:    replication on; RUN/.job-nodes (the controller) drops this node's buddy: the buddy
#            link ckptd reads (RUN/ckptd-<node>/buddy-addr) must follow to the far side of the
#            live nodes' ring,
#            and the batch-host watchers must be re-chosen among the live nodes;
#   topology: `scontrol show topology` puts the far side under the node's own leaf switch: the
#            buddy moves to the nearest node under the other switch (issue 44 hole 12);
#   paused:  the batch host's heartbeat stops but its "slurmd" (a local listener) accepts: a
#            heartbeat_late record, no resubmission;
#   blip:    its heartbeat stops and its "slurmd" does not answer (a listener whose queue is
#            full: connects time out), as in a network or file-system blip that this watcher
#            sees too: noted late ("slurmd":"timeout"), no resubmission within the blip window;
#   dead:    the heartbeat stops and the slurmd port refuses; both watchers run: exactly one
#            sbatch (the submission train.sh saved, replayed: one node fewer, the dead node
#            excluded, the environment with FTRAIN_RESUBMITTED_FROM, no SLURM_JOB_ID, no
#            credential from the disk), the records, the line in the job's output, one scancel;
#   limit:   the same with FTRAIN_RESUBMITS=3 (FTRAIN_MAX_RESUBMITS 3): no sbatch, a record;
#   nospare: the same without spares (same size, the replaced-42 marker); then slurm/train.sh
#            as Slurm's requeued start of job 42: it ends at once with a superseded record;
#   sbatchtimeout: the sbatch stand-in creates the job, then hangs past the agent's bound: the
#            job is found by its token, one job, the old one cancelled once;
#   takeover: the other watcher claimed the resubmission and died before recording anything:
#            this watcher takes the claim over and submits exactly once.
# Exit 0 pass, 1 fail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN_BIN="${FTRAIN_BIN:-${REPO}/build/bin/ftrain}"
[[ -x "${FTRAIN_BIN}" ]] || { echo "agent_watch_test: no ${FTRAIN_BIN}; build first" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-agent-watch.XXXXXX")"
AGENT_PID=""
cleanup() {
  local rc=$?
  if [[ -n "${AGENT_PID}" ]]; then kill -TERM "${AGENT_PID}" 2>/dev/null || true; fi
  if ((rc == 0)); then rm -rf "${WORK}"; else echo "kept ${WORK}" >&2; fi
}
trap cleanup EXIT
log() { echo "[$(date '+%T')] agent_watch_test: $*"; }
fail() { echo "agent_watch_test: FAIL: $*" >&2; exit 1; }

# ---- stand-ins ----------------------------------------------------------------------------
# BIG: host0000..host0599 (the batch host host0001 among the first); SMALL: the same without it.
# shellcheck disable=SC2016,SC2046  # the stand-ins expand their own variables
STUB="${WORK}/bin"
mkdir -p "${STUB}"
cat >"${STUB}/squeue" <<'EOF'
#!/usr/bin/env bash
# squeue -h -j JOB -o %N: the job's node list; the N-th call (1-based) answers BLIP_AT's list.
echo "$*" >>"${STUB_STATE}/squeue_args"
n=$(($(cat "${STUB_STATE}/squeue_calls" 2>/dev/null || echo 0) + 1))
echo "${n}" >"${STUB_STATE}/squeue_calls.tmp" && mv -f "${STUB_STATE}/squeue_calls.tmp" "${STUB_STATE}/squeue_calls"
if [[ "$*" == *"%i|%k"* ]]; then cat "${STUB_STATE}/queue" 2>/dev/null; exit 0; fi
if [[ "$*" == *" -t PD "* ]]; then exit 0; fi
if [[ "${n}" == "${BLIP_AT:-0}" ]]; then echo SMALL; else cat "${STUB_STATE}/nodes"; fi
EOF
cat >"${STUB}/scontrol" <<'EOF'
#!/usr/bin/env bash
names() {  # names FIRST...: FIRST, then host0004..host0599 in a second write 20 ms later
  printf 'host%04d\n' "$@"
  sleep 0.02
  printf 'host%04d\n' $(seq 4 599)
}
case "$*" in
  "show hostnames BIG") names 0 1 2 3 ;;
  "show hostnames SMALL") names 0 2 3 ;;
  "show hostnames "*) tr ',' '\n' <<<"${3}" ;;
  "-o show job "*)
    n=$(($(cat "${STUB_STATE}/show_job_calls" 2>/dev/null || echo 0) + 1))
    echo "${n}" >"${STUB_STATE}/show_job_calls.tmp" && mv -f "${STUB_STATE}/show_job_calls.tmp" "${STUB_STATE}/show_job_calls"
    ((n > ${SHOW_JOB_FAILS:-0})) || { echo "slurm_load_jobs error: Socket timed out" >&2; exit 1; }
    restarts=$({ wc -l <"${STUB_STATE}/requeued"; } 2>/dev/null || echo 0)
    echo "JobId=${4} JobName=x Restarts=${restarts} BatchFlag=1 TimeLimit=00:10:00 ExcNodeList=(null) StdOut=${STUB_STATE}/out-${4}.out MailUser=alice@example.org MailType=END,FAIL" ;;
  "show job "*)
    echo "JobId=${3} JobName=x"
    echo "   JobState=RUNNING Reason=None Restarts=0 BatchFlag=1 TimeLimit=00:10:00 ExcNodeList=(null)"
    echo "   StdOut=${STUB_STATE}/out-${3}.out"
    echo "   MailUser=alice@example.org MailType=END,FAIL" ;;
  "-o show node "*) echo "NodeName=${4} NodeAddr=127.0.0.1 Port=${STUB_SLURMD_PORT:-1}" ;;
  "show topology")
    # STUB_TOPOLOGY=parity: two leaf switches, even hosts under s0, odd ones under s1.
    [[ "${STUB_TOPOLOGY:-}" == parity ]] || { echo "No topology information available" >&2; exit 1; }
    even="" odd=""
    for i in $(seq 0 599); do
      if ((i % 2)); then odd+="$(printf 'host%04d,' "${i}")"; else even+="$(printf 'host%04d,' "${i}")"; fi
    done
    echo "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=${even%,}"
    echo "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=${odd%,}"
    echo "SwitchName=top Level=1 LinkSpeed=1 Switches=s[0-1]" ;;
  "requeue "*) echo "$2" >>"${STUB_STATE}/requeued" ;;
  *) echo "scontrol stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"${STUB}/sbatch" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"${STUB_STATE}/sbatch_args"
env >"${STUB_STATE}/sbatch_env"
for a in "$@"; do [[ "$a" == --comment=* ]] && echo "4242|${a#--comment=}" >>"${STUB_STATE}/queue"; done
[[ "${STUB_SBATCH_HANG:-0}" == 1 ]] && sleep 120
echo 4242
EOF
cat >"${STUB}/scancel" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"${STUB_STATE}/scancelled"
EOF
cat >"${STUB}/ckptd" <<'EOF'
#!/usr/bin/env bash
[[ " $* " == *" --cleanup "* ]] && exit 0
echo "$*" >>"${STUB_STATE}/ckptd_args"
exec sleep 600
EOF
chmod +x "${STUB}"/*

# run_agent NAME NODE [ENV=VALUE...]: agent.sh as NODE of job 42 (batch host host0001, one
# spare) in the background, its state in WORK/NAME.
run_agent() {
  local name="$1" node="$2"
  shift 2
  mkdir -p "${WORK}/${name}/state" "${WORK}/${name}/run"
  echo BIG >"${WORK}/${name}/state/nodes"
  env PATH="${STUB}:${PATH}" STUB_STATE="${WORK}/${name}/state" SLURM_JOB_ID=42 \
    SLURM_JOB_NODELIST=BIG SLURMD_NODENAME="${node}" FTRAIN_RUN_DIR="${WORK}/${name}/run" \
    FTRAIN_BIN="${FTRAIN_BIN}" CKPTD_BIN="${STUB}/ckptd" FTRAIN_SPARE_NODES=1 \
    FTRAIN_BATCH_HOST=host0001 FTRAIN_AGENT_PERIOD_S=0.02 "$@" \
    FTRAIN_HOME="${REPO}" bash "${REPO}/slurm/agent.sh" >"${WORK}/${name}/agent.log" 2>&1 &
  AGENT_PID=$!
}

stop_agent() {
  kill -TERM "${AGENT_PID}" 2>/dev/null || true
  wait "${AGENT_PID}" 2>/dev/null || true
  AGENT_PID=""
}

calls() { cat "${WORK}/$1/state/$2" 2>/dev/null || echo 0; }

wait_calls() {  # wait_calls NAME FILE N: until the stand-in was called N times or a requeue
  local deadline=$((SECONDS + 60))
  until (($(calls "$1" "$2") >= $3 || $(requeues "$1") > 0)); do
    ((SECONDS < deadline)) || fail "$1: only $(calls "$1" "$2") $2 after 60 s: $(cat "${WORK}/$1/agent.log")"
    sleep 0.1
  done
}

requeues() { { wc -l <"${WORK}/$1/state/requeued"; } 2>/dev/null || echo 0; }

# The records of run NAME, merged: restarts.jsonl and every host's spool (records/restarts.h).
records() { cat "${WORK}/$1/run/restarts.jsonl" "${WORK}/$1/run/.records/"*.jsonl 2>/dev/null | sort -u || true; }

# ---- sigpipe ------------------------------------------------------------------------------
run_agent sigpipe host0201
wait_calls sigpipe squeue_calls 30
stop_agent
(($(requeues sigpipe) == 0)) ||
  fail "sigpipe: the watcher requeued a job whose batch host never left: $(cat "${WORK}/sigpipe/agent.log")"
log "sigpipe: $(calls sigpipe squeue_calls) looks at a 600-node job, no false requeue"

# ---- blip ---------------------------------------------------------------------------------
run_agent blip host0201 BLIP_AT=3
wait_calls blip squeue_calls 12
stop_agent
(($(requeues blip) == 0)) || fail "blip: one look without the batch host requeued the job"
log "blip: one look without the batch host, not confirmed, no requeue"

# ---- hiccup -------------------------------------------------------------------------------
run_agent hiccup host0201 SHOW_JOB_FAILS=2
echo SMALL >"${WORK}/hiccup/state/nodes"
deadline=$((SECONDS + 60))
until (($(requeues hiccup) >= 1)); do
  ((SECONDS < deadline)) || fail "hiccup: no requeue 60 s after the batch host left (scontrol show job failed twice first): $(cat "${WORK}/hiccup/agent.log")"
  sleep 0.1
done
sleep 0.5
stop_agent
(($(requeues hiccup) == 1)) || fail "hiccup: requeued $(requeues hiccup) times"
(($(calls hiccup show_job_calls) >= 3)) || fail "hiccup: $(calls hiccup show_job_calls) show job calls, expected 2 failed + 1 or more"
grep -q '"event":"step_failed","cause":"node_failure","node":"host0001","batch_host":true,"watcher":"host0201","detected":[0-9.]*,"detected_by":"slurm"' \
  <<<"$(records hiccup)" || fail "hiccup: no batch-host record in the records"
(($(records hiccup | grep -c batch_host) == 1)) || fail "hiccup: more than one record"
log "hiccup: two failed 'scontrol show job', then one requeue and one record"

# ---- ring ---------------------------------------------------------------------------------
# host0003: not a watcher of the full job (host0201 and host0400 are); its buddy is the far
# side of the 600-node ring, host0303 (hole 12: not host0004, its rack neighbour; the stand-in
# scontrol knows no topology).
run_agent ring host0003 FTRAIN_REPLICATION=1
link="$("${FTRAIN_BIN}" paths "${WORK}/ring/run" --node host0003 --get ckptd_buddy_addr)"
declare -A peer_addr=()
for n in host0303 host0005; do
  peer_addr[${n}]="$("${FTRAIN_BIN}" paths "${WORK}/ring/run" --node "${n}" --get ckptd_peer_addr)"
done
links_to() { [[ "$(readlink "${link}" 2>/dev/null)" == "${peer_addr[$1]}" ]]; }
wait_link() {  # wait_link NODE WHY
  local deadline=$((SECONDS + 60))
  until links_to "$1"; do
    ((SECONDS < deadline)) || fail "ring: ${link} -> '$(readlink "${link}")', not $1's peer-addr ($2): $(cat "${WORK}/ring/agent.log")"
    sleep 0.1
  done
}
wait_link host0303 "the far side of the job's ring"
for ((i = 0; i < 100; i++)); do [[ -s "${WORK}/ring/state/ckptd_args" ]] && break; sleep 0.1; done  # ckptd starts after the link
grep -qF -- "--buddy-file ${link} " "${WORK}/ring/state/ckptd_args" ||
  fail "ring: ckptd was not given --buddy-file ${link}: $(cat "${WORK}/ring/state/ckptd_args")"
echo SMALL >"${WORK}/ring/state/nodes"  # the batch host left; host0003 is no watcher: no requeue
sleep 0.5
(($(requeues ring) == 0)) || fail "ring: host0003 requeued though it is not a watcher"
echo "41 host0003 host0009" >"${WORK}/ring/run/.job-nodes"  # another job's: ignored
sleep 0.5
links_to host0303 || fail "ring: followed another job's .job-nodes"
# A replacement: all but host0001, host0003 and host0005 left the job (the controller rewrote
# the live nodes): host0003 is now the first watcher, host0005 its buddy (N = 3: one on).
echo "42 host0001 host0003 host0005" >"${WORK}/ring/run/.job-nodes"
wait_link host0005 "host0303 left the ring"
deadline=$((SECONDS + 60))
until (($(requeues ring) >= 1)); do  # now a watcher of the batch host
  ((SECONDS < deadline)) || fail "ring: host0003 did not become a watcher: $(cat "${WORK}/ring/agent.log")"
  sleep 0.1
done
stop_agent
log "ring: the buddy link followed .job-nodes (host0303, then host0005); the watchers too"

# ---- topology -----------------------------------------------------------------------------
# Slurm's topology puts even hosts under one leaf switch, odd ones under another: the far side
# host0303 shares host0003's switch, so the buddy is host0304 (the shift 301, the nearest to
# N/2 that puts every buddy under the other switch).
run_agent topo host0003 FTRAIN_REPLICATION=1 STUB_TOPOLOGY=parity
link="$("${FTRAIN_BIN}" paths "${WORK}/topo/run" --node host0003 --get ckptd_buddy_addr)"
want="$("${FTRAIN_BIN}" paths "${WORK}/topo/run" --node host0304 --get ckptd_peer_addr)"
deadline=$((SECONDS + 60))
until [[ "$(readlink "${link}" 2>/dev/null)" == "${want}" ]]; do
  ((SECONDS < deadline)) || fail "topology: ${link} -> '$(readlink "${link}")', not host0304's peer-addr: $(cat "${WORK}/topo/agent.log")"
  sleep 0.1
done
grep -q "Slurm's topology places the buddy under another leaf switch (600 nodes known)" "${WORK}/topo/agent.log" ||
  fail "topology: the agent did not say it used the topology: $(cat "${WORK}/topo/agent.log")"
stop_agent
log "topology: the buddy is under the other leaf switch (host0304), not the far side's same switch"

# ---- the batch host's heartbeat: paused, dead, the resubmission limit -----------------------
port() {  # port open|closed|blackhole: a local TCP port that accepts (listening until
  # killed), refuses, or lets connects time out (its accept queue full, nobody accepting)
  exec python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1], flush=True)
if sys.argv[1]=="open":
  s.listen(); time.sleep(600)
if sys.argv[1]=="blackhole":
  s.listen(0); held=[]
  for i in range(4):
    c=socket.socket(); c.setblocking(False); c.connect_ex(("127.0.0.1", s.getsockname()[1])); held.append(c)
  time.sleep(600)' "$1"
}
# silent_host NAME [SPARES]: a run dir whose batch host host0001 beat once, long ago, and the
# submission the controller saved (2 + SPARES nodes, SPARES spares, default 1) as it saves it
# (src/orch/submission.h: RUN/.submit 0700, its files 0600, the credential withheld by name).
silent_host() {
  local run="${WORK}/$1/run" spares="${2:-1}" sub="${WORK}/$1/run/.submit"
  mkdir -p "${run}/.heartbeats" "${WORK}/$1/state"
  echo "5 1 42" >"${run}/.heartbeats/host0001"
  mkdir -m 0700 "${sub}"
  (
    umask 077
    echo '#!/bin/bash' >"${sub}/script"
    PATH="${STUB}:${PATH}" STUB_STATE="${WORK}/$1/state" scontrol show job 42 >"${sub}/job"
    env -i PATH="${STUB}:${PATH}" STUB_STATE="${WORK}/$1/state" SLURM_JOB_ID=42 \
      SLURM_JOB_NUM_NODES=$((2 + spares)) SLURM_NTASKS_PER_NODE=2 SLURM_SUBMIT_DIR="${WORK}" \
      FTRAIN_SPARE_NODES="${spares}" FTRAIN_KEEP=me env -0 >"${sub}/env"
    echo AWS_SECRET_ACCESS_KEY >"${sub}/env.withheld"
  )
}
wait_record() {  # wait_record NAME EVENT
  local deadline=$((SECONDS + 30))
  until grep -q "\"event\":\"$2\"" <<<"$(records "$1")"; do
    ((SECONDS < deadline)) || fail "$1: no $2 record after 30 s: $(cat "${WORK}/$1/agent"*.log)"
    sleep 0.1
  done
}
wait_scancel() {  # wait_scancel NAME: the watcher's scancel of job 42 (after its records)
  local deadline=$((SECONDS + 30))
  until [[ -s "${WORK}/$1/state/scancelled" ]]; do
    ((SECONDS < deadline)) || fail "$1: the watcher did not cancel job 42 within 30 s: $(cat "${WORK}/$1/agent.log")"
    sleep 0.1
  done
}
FAST=(FTRAIN_HEARTBEAT_TIMEOUT_S=0.3 FTRAIN_DETECT_PERIOD_S=0.05 FTRAIN_PROBE_TIMEOUT_S=1)

silent_host paused
coproc LISTENER { port open; }
read -r open_port <&"${LISTENER[0]}"
run_agent paused host0201 "${FAST[@]}" STUB_SLURMD_PORT="${open_port}"
wait_record paused heartbeat_late
sleep 0.5
stop_agent
kill "${LISTENER_PID}" 2>/dev/null || true
if [[ -e "${WORK}/paused/state/sbatch_args" ]] || grep -q step_failed <<<"$(records paused)"; then
  fail "paused: a batch host whose slurmd answers was taken for dead: $(records paused)"
fi
log "paused: heartbeat silent, slurmd accepting: heartbeat_late, nothing resubmitted"

silent_host blip
coproc BLACKHOLE { port blackhole; }
read -r blackhole_port <&"${BLACKHOLE[0]}"
run_agent blip host0201 "${FAST[@]}" STUB_SLURMD_PORT="${blackhole_port}"
wait_record blip heartbeat_late
sleep 4  # past the old rule's conviction (heartbeat timeout + two probe timeouts), inside 10 s
stop_agent
kill "${BLACKHOLE_PID}" 2>/dev/null || true
grep -q '"event":"heartbeat_late".*"slurmd":"timeout"' <<<"$(records blip)" ||
  fail "blip: the timeout was not noted as a late heartbeat: $(records blip)"
if [[ -e "${WORK}/blip/state/sbatch_args" ]] || grep -q step_failed <<<"$(records blip)"; then
  fail "blip: a batch host whose slurmd timed out for a few seconds was taken for dead: $(records blip)"
fi
log "blip: heartbeat silent, slurmd timing out for seconds: heartbeat_late, nothing resubmitted"

silent_host dead
closed_port="$(port closed)"
run_agent dead host0201 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}" AWS_SECRET_ACCESS_KEY=from-agent
first="${AGENT_PID}"
sleep 0.2
mv "${WORK}/dead/agent.log" "${WORK}/dead/agent1.log"
run_agent dead host0400 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}"
wait_record dead resubmitted
sleep 6  # the second watcher acts 5 s after the first: it must find the claim
stop_agent
AGENT_PID="${first}"
stop_agent
d="${WORK}/dead"
(($(wc -l <"${d}/state/sbatch_args") == 1)) || fail "dead: sbatch ran $(wc -l <"${d}/state/sbatch_args") times"
[[ "$(cat "${d}/state/scancelled")" == 42 ]] || fail "dead: scancel calls: $(cat "${d}/state/scancelled")"
args="$(cat "${d}/state/sbatch_args")"
for want in --nodes=2 --ntasks-per-node=2 --exclude=host0001 --time=00:10:00 "--output=${d}/state/out-%j.out" \
  --mail-user=alice@example.org --mail-type=END,FAIL "${d}/run/.submit/script"; do
  [[ " ${args} " == *" ${want} "* ]] || fail "dead: sbatch args lack ${want}: ${args}"
done
[[ " ${args} " != *" --no-kill "* ]] || fail "dead: --no-kill for a job left without spares: ${args}"
for want in FTRAIN_RESUBMITTED_FROM=42 FTRAIN_RESUBMITS=1 FTRAIN_SPARE_NODES=0 FTRAIN_KEEP=me \
  FTRAIN_RESUBMIT_EXCLUDED=host0001 AWS_SECRET_ACCESS_KEY=from-agent; do
  grep -qx "${want}" "${d}/state/sbatch_env" || fail "dead: the new job's environment lacks ${want}"
done
if grep -q '^SLURM_JOB_ID=' "${d}/state/sbatch_env"; then fail "dead: SLURM_JOB_ID leaked into the new job's environment"; fi
rec="$(grep '"event":"step_failed"' <<<"$(records "${d##*/}")")"
[[ "$(wc -l <<<"${rec}")" == 1 && "${rec}" == *'"node":"host0001","batch_host":true,"watcher":"host0201","detected":'* &&
  "${rec}" == *'"detected_by":"ftrain","verdict":"dead"'* && "${rec}" == *'"slurmd":"refused"'* ]] ||
  fail "dead: step_failed record(s): ${rec}"
grep -q '"event":"resubmitted".*"new_job":"4242"' <<<"$(records dead)" || fail "dead: no resubmitted record naming job 4242"
grep -q "this job continues as job 4242" "${d}/state/out-42.out" || fail "dead: the job's output does not name the new job"
log "dead: one resubmission (sbatch ${args}), one record, one scancel, though both watchers saw it"

silent_host limit
run_agent limit host0201 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}" FTRAIN_RESUBMITS=3
wait_record limit not_resubmitted
stop_agent
[[ ! -e "${WORK}/limit/state/sbatch_args" ]] || fail "limit: resubmitted past FTRAIN_MAX_RESUBMITS"
log "limit: the fourth resubmission in a row is refused (not_resubmitted)"

silent_host nospare 0
run_agent nospare host0201 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}" FTRAIN_SPARE_NODES=0
wait_record nospare resubmitted
# The record comes before the old job's cancel: stopping the agent at once could cut it off.
wait_scancel nospare
stop_agent
d="${WORK}/nospare"
args="$(cat "${d}/state/sbatch_args")"
for want in --nodes=2 --exclude=host0001; do
  [[ " ${args} " == *" ${want} "* ]] || fail "nospare: sbatch args lack ${want} (the same size, the dead node excluded): ${args}"
done
[[ " ${args} " != *" --no-kill "* ]] || fail "nospare: --no-kill for a job without spares: ${args}"
[[ "$(cat "${d}/state/scancelled")" == 42 && "$(cat "${d}/run/.submit/replaced-42")" == 4242 ]] ||
  fail "nospare: scancel calls '$(cat "${d}/state/scancelled")', replaced-42 '$(cat "${d}/run/.submit/replaced-42")'"
if grep -q -- '-o %N' "${d}/state/squeue_args" 2>/dev/null; then
  fail "nospare: looked at Slurm's view of the job's nodes (squeue -o %N), which only --no-kill jobs need"
fi
log "nospare: resubmitted at the same size (sbatch ${args}), old job marked replaced and cancelled, Slurm's view not consulted"
# Slurm requeued the old job anyway (a short SlurmdTimeout): its next start reads the agent's
# marker, ends at once, and says so in its records too.
out="$(env -i PATH="${PATH}" HOME="${HOME:-/tmp}" SLURM_JOB_ID=42 SLURM_RESTART_COUNT=1 \
  FTRAIN_HOME="${REPO}" FTRAIN_BIN="${FTRAIN_BIN}" FTRAIN_CONFIG="${REPO}/configs/tiny.cfg" \
  FTRAIN_RUN_DIR="${d}/run" FTRAIN_DATA=/nonexistent timeout 60 bash "${REPO}/slurm/train.sh" 2>&1)" ||
  fail "nospare: the replaced job's start failed: ${out}"
[[ "${out}" == *"job 42 was submitted again as job 4242 when its batch host died: this start of it ends here"* ]] ||
  fail "nospare: the replaced job's start did not say it ends: ${out}"
rec="$(grep '"event":"superseded"' <<<"$(records nospare)" || true)"
[[ "$(wc -l <<<"${rec}")" == 1 && "${rec}" == *'"job":"42","restart_count":1,"event":"superseded","cause":"replaced","new_job":"4242"}' ]] ||
  fail "nospare: superseded record(s): '${rec}'"
if grep -q '"job":"42","restart_count":1,"event":"\(requeued\|started\)"' <<<"$(records nospare)"; then
  fail "nospare: the replaced job's start recorded a start"
fi
report="$("${FTRAIN_BIN}" report "${d}/run" 2>&1)" || true
[[ "${report}" == *"superseded (replaced), job 42: the job continues as job 4242"* ]] ||
  fail "nospare: ftrain report does not show the superseded start: ${report}"
log "nospare: the old job's requeued start ended at once with a superseded record naming job 4242"
# takeover: the other watcher (host0400) claimed the resubmission and died before recording
# anything (its heartbeat stopped, its slurmd refuses): host0201 takes the claim over.
silent_host takeover
d="${WORK}/takeover"
mkdir -p "${d}/run/.submit/claim-42.0"
echo host0400 >"${d}/run/.submit/claim-42.0/by"
echo "3 1 42" >"${d}/run/.heartbeats/host0400"
run_agent takeover host0201 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}"
wait_record takeover resubmitted
wait_scancel takeover
stop_agent
(($(wc -l <"${d}/state/sbatch_args") == 1)) || fail "takeover: sbatch ran $(wc -l <"${d}/state/sbatch_args") times"
[[ -d "${d}/run/.submit/claim-42.0.takeover" ]] || fail "takeover: no claim-42.0.takeover"
grep -q "the other watcher host0400 claimed job 42's resubmission and died: taking it over" "${d}/agent.log" ||
  fail "takeover: the agent did not say it took the claim over: $(cat "${d}/agent.log")"
rec="$(grep '"event":"step_failed"' <<<"$(records "${d##*/}")")"
[[ "$(wc -l <<<"${rec}")" == 1 && "${rec}" == *'"node":"host0001","batch_host":true,"watcher":"host0201"'* ]] ||
  fail "takeover: step_failed record(s) (the batch host's, not the dead watcher's): ${rec}"
log "takeover: the claimant died before submitting; the other watcher took the claim over and submitted once"

# sbatchtimeout: sbatch creates the job and hangs past the agent's bound (2 s here): the job is
# found by the token the agent gave it (--comment), so it is neither lost nor made twice.
silent_host sbatchtimeout
run_agent sbatchtimeout host0201 "${FAST[@]}" STUB_SLURMD_PORT="${closed_port}" STUB_SBATCH_HANG=1 \
  FTRAIN_SBATCH_TIMEOUT_S=2
d="${WORK}/sbatchtimeout"
deadline=$((SECONDS + 60))
until grep -q '"event":"\(not_\)\?resubmitted"' <<<"$(records sbatchtimeout)"; do
  ((SECONDS < deadline)) || fail "sbatchtimeout: no outcome after 60 s: $(cat "${d}/agent.log")"
  sleep 0.5
done
wait_scancel sbatchtimeout
stop_agent
(($(wc -l <"${d}/state/sbatch_args") == 1)) || fail "sbatchtimeout: sbatch ran $(wc -l <"${d}/state/sbatch_args") times"
grep -q '"event":"resubmitted".*"new_job":"4242"' <<<"$(records sbatchtimeout)" ||
  fail "sbatchtimeout: the job sbatch made was not found: $(records sbatchtimeout)"
[[ "$(cat "${d}/state/scancelled")" == 42 ]] || fail "sbatchtimeout: scancel calls: $(cat "${d}/state/scancelled")"
log "sbatchtimeout: the job a hung sbatch made was found by its token; one job, one cancel"
log "PASS"
