#!/usr/bin/env bash
# local-cluster.sh - run a real Slurm 22.05 cluster (munged, slurmctld, N slurmd) on this one
# machine, for tests of requeue / node failure / PMIx. Needs root. Each slurmd runs in its own
# mount namespace so `fail-node` can SIGKILL exactly one "node" (slurmd + its job steps), and
# each namespace has its own tmpfs on /dev/shm, so a node's shared memory (ckptd's snapshots)
# dies with the node as on a real crash.
# It does not install packages and never touches daemons it did not start (all by PID).
# All state lives under $FTRAIN_CLUSTER_DIR (default <repo>/.cluster). See docs/local-cluster.md.
#
# Opt-in (start --netns, or FTRAIN_CLUSTER_NETNS=1): each slurmd also gets its own network and
# UTS namespace (its own address on a bridge, its own host name and /etc/hosts), so that
# `partition A B` can cut the network between two nodes.
#
# Usage: local-cluster.sh start [--nodes N] [--cpus-per-node C] [--netns] | stop | status
#                         | fail-node NAME | revive-node NAME | node-exec NAME CMD... | env
#                         | pause-node NAME | resume-node NAME
#                         | partition NAME NAME | heal NAME NAME   (--netns clusters only)
#                         | timeouts SLURMD_TIMEOUT MESSAGE_TIMEOUT
set -euo pipefail

# ---- settings (environment overrides) ---------------------------------------------------------
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
# Physical path: it is matched against /proc/PID/mountinfo, which shows resolved paths.
STATE_DIR="$(realpath -m -- "${FTRAIN_CLUSTER_DIR:-${REPO_ROOT}/.cluster}")"
PORT_BASE="${FTRAIN_CLUSTER_PORT_BASE:-16817}"        # slurmctld; slurmd of nodeI: base+I
DEFAULT_NODES=2
DEFAULT_CPUS_PER_NODE=2
SLURMD_TIMEOUT="${FTRAIN_CLUSTER_SLURMD_TIMEOUT:-5}"  # s without a ping answer -> node DOWN
MSG_TIMEOUT="${FTRAIN_CLUSTER_MSG_TIMEOUT:-3}"        # s per RPC; pinging a dead node takes ~this+1
CRED_EXPIRE="${FTRAIN_CLUSTER_CRED_EXPIRE:-5}"        # s; requeued job waits this+1 (Slurm min 5)
DEBUG_LEVEL="${FTRAIN_CLUSTER_DEBUG:-info}"           # SlurmctldDebug / SlurmdDebug
START_TIMEOUT_S="${FTRAIN_CLUSTER_START_TIMEOUT:-60}" # wait for daemons / nodes idle
# Each node's private /dev/shm (tmpfs size=, e.g. 2g, 512m, 10%); default: the host's /dev/shm
# divided among the nodes, so all of them together hold no more than the host's would.
SHM_SIZE="${FTRAIN_CLUSTER_SHM_SIZE:-}"
NETNS="${FTRAIN_CLUSTER_NETNS:-0}"                    # 1: per-node network namespaces (--netns)
# The first three octets of the --netns cluster's /24 (bridge .1, nodeI .(1+I)); default
# 10.77.(port base % 250).
NET_PREFIX="${FTRAIN_CLUSTER_NETNS_PREFIX:-}"
STOP_TIMEOUT_S=20
NODE_PREFIX="node"
CLUSTER_NAME="ftrain"
MUNGE_USER="munge"
CTLD_HOST="$(hostname -s)"

# ---- derived paths -------------------------------------------------------------------------
ETC_DIR="${STATE_DIR}/etc"
LOG_DIR="${STATE_DIR}/log"
PID_DIR="${STATE_DIR}/pids"
SPOOL_DIR="${STATE_DIR}/spool"
NODES_DIR="${STATE_DIR}/nodes"     # per-node private dirs, bind-mounted onto PMIX_CLI_DIR
PMIX_CLI_DIR="${STATE_DIR}/pmix"   # empty mount point; each node namespace sees its own dir
# munged (user munge) refuses directories it cannot reach or that others may write, and a
# checkout under /root (mode 0700) is unreachable for it: keep its files under /run.
MUNGE_DIR="${FTRAIN_CLUSTER_MUNGE_DIR:-/run/ftrain-munge-${PORT_BASE}}"
SLURM_CONF_FILE="${ETC_DIR}/slurm.conf"
MPI_CONF_FILE="${ETC_DIR}/mpi.conf"
NODES_FILE="${ETC_DIR}/nodes"      # node names, one per line (written by start)
SHM_SIZE_FILE="${ETC_DIR}/shm-size" # each node's /dev/shm size= (written by start, used by revive)
MUNGE_SOCKET="${MUNGE_DIR}/munge.socket"
MUNGE_KEY="${MUNGE_DIR}/munge.key"
MUNGE_LOG="${MUNGE_DIR}/munged.log"  # munged (user munge) cannot write LOG_DIR
NETNS_FILE="${ETC_DIR}/netns"      # --netns clusters: "PREFIX PORT_BASE" (written by start)
HOSTS_FILE="${ETC_DIR}/hosts"      # --netns clusters: every node's /etc/hosts

die() { echo "local-cluster: error: $*" >&2; exit 1; }
usage_error() { echo "local-cluster: usage error: $*" >&2; usage >&2; exit 2; }
log() { echo "local-cluster: $*"; }
usage() {
  cat <<EOF
usage: $(basename "$0") start [--nodes N] [--cpus-per-node C] [--netns]
       $(basename "$0") stop | status | env
       $(basename "$0") fail-node NAME | revive-node NAME | pause-node NAME | resume-node NAME
       $(basename "$0") node-exec NAME CMD [ARG...]   (CMD in NAME's mount namespace)
       $(basename "$0") partition NAME NAME | heal NAME NAME   (cut / restore the network
                        between two nodes; clusters started with --netns only)
       $(basename "$0") timeouts SLURMD_TIMEOUT MESSAGE_TIMEOUT   (running cluster; prints the old)
state dir: ${STATE_DIR} (env FTRAIN_CLUSTER_DIR), ports from ${PORT_BASE} (FTRAIN_CLUSTER_PORT_BASE)
EOF
}

# ---- small helpers -------------------------------------------------------------------------
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

pid_alive() {  # pid_alive PID: true if PID exists and is not a zombie
  local pid="$1" state
  [[ -n "${pid}" && -r "/proc/${pid}/stat" ]] || return 1
  state="$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" || return 1
  [[ -n "${state}" && "${state}" != "Z" ]]
}

read_pid() {  # read_pid NAME: prints the recorded pid of daemon NAME, or nothing
  local f="${PID_DIR}/$1.pid"
  if [[ -r "${f}" ]]; then cat "${f}"; fi
}

daemon_alive() { pid_alive "$(read_pid "$1")"; }

wait_until() {  # wait_until SECONDS CMD...: poll CMD every 0.2 s until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

export_conf() { export SLURM_CONF="${SLURM_CONF_FILE}"; }

node_names() {
  [[ -r "${NODES_FILE}" ]] || die "no cluster configured under ${STATE_DIR}; run: $0 start"
  cat "${NODES_FILE}"
}

check_node_name() {
  local n
  for n in $(node_names); do [[ "${n}" == "$1" ]] && return 0; done
  usage_error "unknown node '$1' (nodes: $(node_names | paste -sd' '))"
}

node_state() {  # node_state NAME: compact sinfo state, e.g. idle, alloc, down*, idle*
  sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n1
}

# Every process in the mount namespace NS that also carries the node's marker bind mount
# (so a recycled namespace inode can never make us kill a stranger).
node_ns_pids() {  # node_ns_pids NODE NS
  local node="$1" ns="$2" p pid
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [[ "$(readlink "${p}/ns/mnt" 2>/dev/null)" == "${ns}" ]] || continue
    grep -qF " ${PMIX_CLI_DIR} " "${p}/mountinfo" 2>/dev/null || continue
    grep -qF "/nodes/${node}/pmix " "${p}/mountinfo" 2>/dev/null || continue
    echo "${pid}"
  done
}

# signal_node_namespace NODE NS SIG: SIG to every process of the node, twice (the second pass
# catches a child forked while the first ran; against SIGSTOP nothing can fork after it).
signal_node_namespace() {
  local node="$1" ns="$2" sig="$3" pid _
  for _ in 1 2; do
    for pid in $(node_ns_pids "${node}" "${ns}"); do kill "-${sig}" "${pid}" 2>/dev/null || true; done
  done
}

# PIDS (one per line) ordered children before parents: the deepest in their process tree
# first. Killing stopped processes in that order never orphans a process group that still has
# a stopped member, for which the kernel would send SIGHUP and SIGCONT to every member (POSIX:
# exit of a parent outside the group), waking a frozen srun or script to act on a hangup.
leaves_first() {  # leaves_first PIDS
  local pid st
  for pid in $1; do
    st="$(cat "/proc/${pid}/stat" 2>/dev/null)" || continue
    st="${st##*) }"     # after "(comm) ": "STATE PPID ..."
    st="${st#* }"
    echo "${pid} ${st%% *}"
  done | awk '{ parent[$1] = $2; order[NR] = $1 }
    function depth(p,  d) { d = 0; while ((p in parent) && d < 1000) { p = parent[p]; d++ } return d }
    END { for (i = 1; i <= NR; i++) print depth(order[i]), order[i] }' | sort -k1,1nr | cut -d' ' -f2
}

kill_node_namespace() {  # kill_node_namespace NODE: SIGKILL everything of that node, wait
  local node="$1" ns_file="${PID_DIR}/slurmd-$1.mntns" ns pids pid
  [[ -r "${ns_file}" ]] || return 0
  ns="$(cat "${ns_file}")"
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  while :; do
    pids="$(node_ns_pids "${node}" "${ns}")"
    [[ -z "${pids}" ]] && break
    ((SECONDS < deadline)) || die "processes of ${node} survive SIGKILL: ${pids//$'\n'/ }"
    for pid in $(leaves_first "${pids}"); do
      kill -KILL "${pid}" 2>/dev/null || true  # it may have exited meanwhile: fine
    done
    sleep 0.2
  done
  rm -f "${ns_file}"
}

# ---- per-node network namespaces (start --netns) ----------------------------------------------
# A bridge ft<base>br in this (the root) namespace holds PREFIX.1, where slurmctld listens; node
# I's namespace ftrain-<base>-nodeI holds PREFIX.(1+I) on eth0, a veth whose other end
# (ft<base>hI) is a port of the bridge. Everything is made and removed by name; <base> is the
# port base the cluster was started with (recorded, so a later call with another env agrees).
netns_on() { [[ -s "${NETNS_FILE}" ]]; }
netns_prefix() { cut -d' ' -f1 "${NETNS_FILE}"; }
net_tag() { echo "ft$(cut -d' ' -f2 "${NETNS_FILE}")"; }  # ft<base>: <base>br, <base>hI
node_index() { echo "${1#"${NODE_PREFIX}"}"; }
node_netns() { echo "ftrain-$(cut -d' ' -f2 "${NETNS_FILE}")-$1"; }
node_netns_path() { echo "/run/netns/$(node_netns "$1")"; }
node_veth() { echo "$(net_tag)h$(node_index "$1")"; }
node_addr() { echo "$(netns_prefix).$((1 + $(node_index "$1")))"; }

net_ip() {  # net_ip ARGS...: `ip ARGS`, or die naming the command
  ip "$@" || die "'ip $*' failed (per-node network namespaces need root with CAP_NET_ADMIN \
and a kernel with veth and bridge support)"
}

netns_setup() {  # the bridge, and every node's namespace, veth, address and /etc/hosts
  local prefix node ns veth br
  prefix="$(netns_prefix)" br="$(net_tag)br"
  if ip -4 -o addr show | grep -qF " ${prefix}."; then
    die "addresses ${prefix}.0/24 are in use on this host; pick another prefix with \
FTRAIN_CLUSTER_NETNS_PREFIX (three octets, e.g. 10.78.1)"
  fi
  net_ip link add "${br}" type bridge
  net_ip addr add "${prefix}.1/24" dev "${br}"
  net_ip link set "${br}" up
  {
    echo "# Generated by slurm/local-cluster.sh --netns: every node's /etc/hosts."
    echo "127.0.0.1 localhost"
    echo "${prefix}.1 ${CTLD_HOST}"
    for node in $(node_names); do echo "$(node_addr "${node}") ${node}"; done
  } >"${HOSTS_FILE}"
  for node in $(node_names); do
    ns="$(node_netns "${node}")" veth="$(node_veth "${node}")"
    net_ip netns add "${ns}"
    net_ip link add "${veth}" type veth peer name "${veth}n"
    net_ip link set "${veth}n" netns "${ns}"
    net_ip link set "${veth}" master "${br}" up
    net_ip -n "${ns}" link set lo up
    net_ip -n "${ns}" link set "${veth}n" name eth0
    net_ip -n "${ns}" addr add "$(node_addr "${node}")/24" dev eth0
    net_ip -n "${ns}" link set eth0 up
  done
}

# Removes what netns_setup made, by name (call it once the nodes' processes are gone: a process
# left in a namespace would keep it, and its veth, alive). Fine when some of it is missing.
netns_teardown() {
  local node
  for node in $(node_names); do
    ip netns del "$(node_netns "${node}")" 2>/dev/null || true    # already gone: fine
    ip link del "$(node_veth "${node}")" 2>/dev/null || true      # went with its namespace
  done
  ip link del "$(net_tag)br" 2>/dev/null || true                  # already gone: fine
  rm -f "${NETNS_FILE}" "${HOSTS_FILE}"
}

# ---- configuration -----------------------------------------------------------------------
write_configs() {  # write_configs NODES CPUS
  local nodes="$1" cpus="$2" i
  mkdir -p "${ETC_DIR}"
  : >"${NODES_FILE}"
  for ((i = 1; i <= nodes; i++)); do echo "${NODE_PREFIX}${i}" >>"${NODES_FILE}"; done
  {
    echo "# Generated by slurm/local-cluster.sh - do not edit; see docs/local-cluster.md."
    echo "ClusterName=${CLUSTER_NAME}"
    echo "SlurmctldHost=${CTLD_HOST}($(if netns_on; then echo "$(netns_prefix).1"; else echo 127.0.0.1; fi))"
    echo "SlurmctldPort=${PORT_BASE}"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=${MUNGE_SOCKET},cred_expire=${CRED_EXPIRE}"
    echo "StateSaveLocation=${SPOOL_DIR}/slurmctld"
    echo "SlurmdSpoolDir=${SPOOL_DIR}/%n"
    echo "SlurmctldPidFile=${SPOOL_DIR}/slurmctld.pid"
    echo "SlurmdPidFile=${SPOOL_DIR}/slurmd-%n.pid"
    echo "SlurmctldLogFile=${LOG_DIR}/slurmctld.log"
    echo "SlurmdLogFile=${LOG_DIR}/slurmd-%n.log"
    echo "SlurmctldDebug=${DEBUG_LEVEL}"
    echo "SlurmdDebug=${DEBUG_LEVEL}"
    echo "SlurmdParameters=config_overrides"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=pmix"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/builtin"
    echo "SchedulerParameters=sched_interval=1,permit_job_expansion"
    echo "JobRequeue=1"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=${SLURMD_TIMEOUT}"
    echo "MessageTimeout=${MSG_TIMEOUT}"
    echo "KillWait=2"
    echo "KillOnBadExit=1"
    echo "InactiveLimit=0"
    echo "MailProg=/bin/true"
    echo "MinJobAge=300"
    echo "NodeName=DEFAULT CPUs=${cpus} State=UNKNOWN"
    for ((i = 1; i <= nodes; i++)); do
      if netns_on; then  # its own host name and address in its own network namespace
        echo "NodeName=${NODE_PREFIX}${i} NodeHostname=${NODE_PREFIX}${i}" \
          "NodeAddr=$(netns_prefix).$((1 + i)) Port=$((PORT_BASE + i))"
      else
        echo "NodeName=${NODE_PREFIX}${i} NodeHostname=${CTLD_HOST} NodeAddr=127.0.0.1" \
          "Port=$((PORT_BASE + i))"
      fi
    done
    echo "PartitionName=debug Nodes=${NODE_PREFIX}[1-${nodes}] Default=YES MaxTime=INFINITE" \
      "State=UP"
  } >"${SLURM_CONF_FILE}"
  {
    echo "# Generated by slurm/local-cluster.sh. Read by the pmix plugin (next to slurm.conf)."
    echo "# ${PMIX_CLI_DIR} is bind-mounted per node inside each slurmd's mount namespace."
    echo "PMIxCliTmpDirBase=${PMIX_CLI_DIR}"
  } >"${MPI_CONF_FILE}"
}

# ---- daemons -------------------------------------------------------------------------------
start_munged() {
  if daemon_alive munged; then return 0; fi
  id "${MUNGE_USER}" >/dev/null 2>&1 || die "user '${MUNGE_USER}' missing (install munge)"
  # munged wants its dirs owned by itself and not writable by others.
  install -d -m 0755 -o "${MUNGE_USER}" -g "${MUNGE_USER}" "${MUNGE_DIR}"
  if [[ ! -s "${MUNGE_KEY}" ]]; then
    dd if=/dev/urandom of="${MUNGE_KEY}" bs=1024 count=1 status=none
  fi
  chown "${MUNGE_USER}:${MUNGE_USER}" "${MUNGE_KEY}"
  chmod 0400 "${MUNGE_KEY}"
  ((${#MUNGE_SOCKET} < 100)) || die "munge socket path too long (${#MUNGE_SOCKET} chars, unix \
sockets allow ~107): ${MUNGE_SOCKET}; set FTRAIN_CLUSTER_DIR to a shorter path"
  rm -f "${MUNGE_DIR}/munged.pid"  # a stale one (munged was SIGKILLed) would fool the wait below
  runuser -u "${MUNGE_USER}" -- munged --socket="${MUNGE_SOCKET}" --key-file="${MUNGE_KEY}" \
    --pid-file="${MUNGE_DIR}/munged.pid" --log-file="${MUNGE_LOG}" \
    --seed-file="${MUNGE_DIR}/munged.seed" </dev/null >>"${LOG_DIR}/munged.out" 2>&1 ||
    die "munged failed to start; see ${MUNGE_LOG} and ${LOG_DIR}/munged.out"
  wait_until 10 test -s "${MUNGE_DIR}/munged.pid" ||
    die "munged wrote no pid file; see ${MUNGE_LOG}"
  cp "${MUNGE_DIR}/munged.pid" "${PID_DIR}/munged.pid"
  wait_until 10 munge_works || die "munged does not answer on ${MUNGE_SOCKET}; see \
${MUNGE_LOG}"
}

munge_works() {
  munge -n -S "${MUNGE_SOCKET}" 2>/dev/null | unmunge -S "${MUNGE_SOCKET}" >/dev/null 2>&1
}

start_slurmctld() {
  if daemon_alive slurmctld; then return 0; fi
  # -D: foreground, so $! is the daemon; setsid: immune to the caller's terminal / ctest.
  # -i: ignore state-file errors (the spool is wiped by start anyway).
  setsid slurmctld -D -i -f "${SLURM_CONF_FILE}" </dev/null >>"${LOG_DIR}/slurmctld.out" 2>&1 &
  echo "$!" >"${PID_DIR}/slurmctld.pid"
  wait_until "${START_TIMEOUT_S}" ctld_up ||
    die "slurmctld not answering after ${START_TIMEOUT_S}s; see ${LOG_DIR}/slurmctld.log \
and ${LOG_DIR}/slurmctld.out"
}

ctld_up() {
  daemon_alive slurmctld || die "slurmctld exited; see ${LOG_DIR}/slurmctld.log and \
${LOG_DIR}/slurmctld.out"
  scontrol ping 2>/dev/null | grep -q 'is UP'
}

# The size= of each node's /dev/shm when FTRAIN_CLUSTER_SHM_SIZE is not set: the host's
# /dev/shm (or half the RAM, tmpfs's own default, if the host has none) divided by NODES.
default_shm_size() {  # default_shm_size NODES
  local kib
  kib="$(df -k --output=size /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ')" || kib=""
  if ! is_uint "${kib}" || ((kib == 0)); then
    kib=$(($(awk '$1 == "MemTotal:" {print $2}' /proc/meminfo) / 2))
  fi
  echo "$((kib / $1))k"
}

start_slurmd() {  # start_slurmd NODE: slurmd in a fresh private mount namespace
  local node="$1" pid ns shm_size
  if daemon_alive "slurmd-${node}"; then return 0; fi
  # Leftovers of a failed node (step daemons) would confuse the new slurmd: remove them first.
  # Once they are gone the old namespace, and with it the old /dev/shm tmpfs, is freed.
  kill_node_namespace "${node}"
  shm_size="$(cat "${SHM_SIZE_FILE}")" || die "no ${SHM_SIZE_FILE}; run: $0 start"
  mkdir -p "${NODES_DIR}/${node}/pmix" "${SPOOL_DIR}/${node}"
  chmod 0755 "${SPOOL_DIR}/${node}"
  # Inside the namespace: a fresh, empty tmpfs on /dev/shm (world-writable and sticky like the
  # host's), so the node's shared memory lives and dies with the namespace, that is with its
  # processes; bind this node's private dir onto the shared PMIx client dir (sticky+world-
  # writable like /tmp: jobs of any user create their PMIx client dirs there); then exec slurmd
  # (same pid as unshare).
  chmod 1777 "${NODES_DIR}/${node}/pmix"
  # --netns: first into the node's network namespace, and a UTS namespace with the node's
  # name as host name and ${HOSTS_FILE} as /etc/hosts (how its ranks find each other).
  local enter=() uts=() netns_sh=""
  if netns_on; then
    enter=(nsenter --net="$(node_netns_path "${node}")" --)
    uts=(--uts)
    # shellcheck disable=SC2016  # $4, $6 expand in the inner shell, on purpose
    netns_sh='hostname "$4" && mount --bind "$6" /etc/hosts && '
  fi
  # shellcheck disable=SC2016  # $1..$5 expand in the inner shell, on purpose
  setsid "${enter[@]}" unshare --mount "${uts[@]}" --propagation private -- /bin/sh -c \
    "${netns_sh}"'mount -t tmpfs -o "size=$5,mode=1777,nosuid,nodev" "ftrain-shm-$4" /dev/shm &&
     mount --bind "$1" "$2" && exec slurmd -D -f "$3" -N "$4"' \
    local-cluster-ns "${NODES_DIR}/${node}/pmix" "${PMIX_CLI_DIR}" "${SLURM_CONF_FILE}" "${node}" \
    "${shm_size}" "${HOSTS_FILE}" </dev/null >>"${LOG_DIR}/slurmd-${node}.out" 2>&1 &
  pid="$!"
  echo "${pid}" >"${PID_DIR}/slurmd-${node}.pid"
  # Record the namespace once the bind mount exists (the inner sh has set it up).
  wait_until 10 node_mounted "${pid}" "${node}" ||
    die "slurmd for ${node} did not start; see ${LOG_DIR}/slurmd-${node}.out"
  ns="$(readlink "/proc/${pid}/ns/mnt")"
  echo "${ns}" >"${PID_DIR}/slurmd-${node}.mntns"
}

node_mounted() {  # node_mounted PID NODE: both mounts of the node's namespace are in place
  pid_alive "$1" || return 1
  grep -qF " - tmpfs ftrain-shm-$2 " "/proc/$1/mountinfo" 2>/dev/null &&
    grep -qF "/nodes/$2/pmix " "/proc/$1/mountinfo" 2>/dev/null
}

# Prints the pid of NODE's slurmd if it runs in the namespace recorded for NODE (so a recycled
# pid never lets us enter a stranger's namespace); fails otherwise.
node_ns_pid() {  # node_ns_pid NODE
  local pid ns_file="${PID_DIR}/slurmd-$1.mntns"
  pid="$(read_pid "slurmd-$1")"
  pid_alive "${pid}" && [[ -r "${ns_file}" ]] || return 1
  [[ "$(readlink "/proc/${pid}/ns/mnt" 2>/dev/null)" == "$(cat "${ns_file}")" ]] || return 1
  node_mounted "${pid}" "$1" || return 1
  echo "${pid}"
}

node_is_down() { [[ "$(node_state "$1")" =~ ^down ]]; }  # down, down*, down~ ...

node_ready() {  # node_ready NODE: responding and usable (idle, or already running a job)
  local node="$1" st
  daemon_alive "slurmd-${node}" || die "slurmd of ${node} exited; see \
${LOG_DIR}/slurmd-${node}.log and ${LOG_DIR}/slurmd-${node}.out"
  st="$(node_state "${node}")"
  [[ "${st}" =~ ^(idle|alloc|mix|comp)$ ]]
}

all_nodes_idle() {
  local node
  for node in $(node_names); do
    daemon_alive "slurmd-${node}" || die "slurmd of ${node} exited; see \
${LOG_DIR}/slurmd-${node}.log and ${LOG_DIR}/slurmd-${node}.out"
    [[ "$(node_state "${node}")" == "idle" ]] || return 1
  done
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, wait, then SIGKILL
  local name="$1" pid
  pid="$(read_pid "${name}")"
  if pid_alive "${pid}"; then
    kill -TERM "${pid}" 2>/dev/null || true  # exited meanwhile: fine
    if ! wait_until "${STOP_TIMEOUT_S}" not_alive "${pid}"; then
      log "${name} (pid ${pid}) ignored SIGTERM; sending SIGKILL"
      kill -KILL "${pid}" 2>/dev/null || true  # exited meanwhile: fine
      wait_until 5 not_alive "${pid}" || die "${name} (pid ${pid}) survives SIGKILL"
    fi
  fi
  rm -f "${PID_DIR}/${name}.pid"
}

port_in_use() {  # port_in_use PORT: something accepts TCP connections on localhost:PORT
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

not_alive() { ! pid_alive "$1"; }

any_daemon_alive() {
  local f
  for f in "${PID_DIR}"/*.pid; do
    [[ -e "${f}" ]] || continue
    pid_alive "$(cat "${f}")" && return 0
  done
  return 1
}

on_start_failure() {
  local rc=$?
  trap - EXIT
  if ((rc != 0)); then
    echo "local-cluster: start failed; stopping the daemons it started (logs kept)" >&2
    (cmd_stop >/dev/null) || true  # best effort; the original error is what matters
  fi
  exit "${rc}"
}

# ---- subcommands ---------------------------------------------------------------------------
# The settings start needs (environment, tools), or die naming the bad one.
check_start_settings() {
  [[ "$(id -u)" == "0" ]] || die "must run as root (slurmd/munged need it)"
  is_uint "${PORT_BASE}" || die "FTRAIN_CLUSTER_PORT_BASE must be a number, got '${PORT_BASE}'"
  local v
  for v in SLURMD_TIMEOUT:FTRAIN_CLUSTER_SLURMD_TIMEOUT MSG_TIMEOUT:FTRAIN_CLUSTER_MSG_TIMEOUT \
    CRED_EXPIRE:FTRAIN_CLUSTER_CRED_EXPIRE START_TIMEOUT_S:FTRAIN_CLUSTER_START_TIMEOUT; do
    local name="${v%%:*}"
    if ! is_uint "${!name}" || ((${!name} < 1)); then
      die "${v#*:} must be an integer >= 1, got '${!name}'"
    fi
  done
  # Slurm 22.05 rejects cred_expire < 5 and silently falls back to 120 s.
  ((CRED_EXPIRE >= 5)) || die "FTRAIN_CLUSTER_CRED_EXPIRE must be >= 5 (Slurm minimum), \
got ${CRED_EXPIRE}"
  local cmd
  if [[ -n "${SHM_SIZE}" && ! "${SHM_SIZE}" =~ ^[1-9][0-9]*[kKmMgGtT%]?$ ]]; then
    die "FTRAIN_CLUSTER_SHM_SIZE must be a tmpfs size such as 2g, 512m or 10%, got '${SHM_SIZE}'"
  fi
  for cmd in munged munge unmunge slurmctld slurmd scontrol sinfo unshare nsenter mount runuser \
    setsid; do
    command -v "${cmd}" >/dev/null || die "'${cmd}' not found (install slurm-wlm and munge)"
  done
  [[ "${NETNS}" == 0 || "${NETNS}" == 1 ]] || die "FTRAIN_CLUSTER_NETNS must be 0 or 1, got '${NETNS}'"
  if ((NETNS)); then
    command -v ip >/dev/null || die "'ip' not found: --netns needs iproute2"
    NET_PREFIX="${NET_PREFIX:-10.77.$((PORT_BASE % 250))}"
    [[ "${NET_PREFIX}" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
      die "FTRAIN_CLUSTER_NETNS_PREFIX must be three octets such as 10.77.0, got '${NET_PREFIX}'"
  fi
}

cmd_start() {
  local nodes="${DEFAULT_NODES}" cpus="${DEFAULT_CPUS_PER_NODE}" node
  while (($#)); do
    case "$1" in
      --netns) NETNS=1; shift ;;
      --nodes=* | --cpus-per-node=*)  # --opt=value: split and re-parse
        set -- "${1%%=*}" "${1#*=}" "${@:2}"
        ;;
      --nodes | --cpus-per-node)
        (($# >= 2)) || usage_error "$1 needs a value"
        if ! is_uint "$2" || (($2 < 1)); then
          usage_error "$1 must be an integer >= 1, got '$2'"
        fi
        if [[ "$1" == "--nodes" ]]; then nodes="$2"; else cpus="$2"; fi
        shift 2
        ;;
      *) usage_error "unknown option for start: '$1'" ;;
    esac
  done
  ((nodes <= 64)) || usage_error "--nodes must be <= 64, got ${nodes}"
  check_start_settings

  if daemon_alive slurmctld; then
    export_conf
    log "already running (slurmctld pid $(read_pid slurmctld)); state dir ${STATE_DIR}"
    log "use '$0 stop' first to start with a different size"
    for node in $(node_names); do
      daemon_alive "slurmd-${node}" ||
        log "warning: ${node} is failed; run '$0 revive-node ${node}'"
    done
    return 0
  fi
  if any_daemon_alive; then
    die "a partial cluster is running under ${STATE_DIR}; run '$0 stop' first"
  fi

  local port
  for ((port = PORT_BASE; port <= PORT_BASE + nodes; port++)); do
    if port_in_use "${port}"; then
      die "port ${port} is in use (another cluster?); pick another base with \
FTRAIN_CLUSTER_PORT_BASE (needs ports base..base+N free)"
    fi
  done

  # Fresh start: keep logs, drop Slurm state and per-node dirs from a previous run, after
  # killing job processes a previous run may have left in its node namespaces.
  if [[ -r "${NODES_FILE}" ]]; then
    for node in $(node_names); do kill_node_namespace "${node}"; done
    if netns_on; then netns_teardown; fi
  fi
  mkdir -p "${STATE_DIR}" "${LOG_DIR}" "${PID_DIR}" "${PMIX_CLI_DIR}"
  # Make the state dir ignore itself, so it never shows up in `git status`.
  [[ -e "${STATE_DIR}/.gitignore" ]] || echo '*' >"${STATE_DIR}/.gitignore"
  rm -rf "${SPOOL_DIR}" "${NODES_DIR}"
  mkdir -p "${SPOOL_DIR}/slurmctld" "${NODES_DIR}"
  rm -f "${NETNS_FILE}"
  if ((NETNS)); then mkdir -p "${ETC_DIR}" && echo "${NET_PREFIX} ${PORT_BASE}" >"${NETNS_FILE}"; fi
  write_configs "${nodes}" "${cpus}"
  echo "${SHM_SIZE:-$(default_shm_size "${nodes}")}" >"${SHM_SIZE_FILE}"
  export_conf
  local stamp
  stamp="==== local-cluster start $(date '+%F %T') nodes=${nodes} cpus=${cpus} ===="
  local f
  for f in slurmctld munged; do echo "${stamp}" >>"${LOG_DIR}/${f}.out"; done

  log "starting munged, slurmctld and ${nodes} slurmd (${cpus} CPUs, private /dev/shm of \
size=$(cat "${SHM_SIZE_FILE}") each) in ${STATE_DIR}"
  # On any failure below, take down what was started so the next `start` begins clean.
  trap 'on_start_failure' EXIT
  if netns_on; then
    netns_setup
    log "per-node network namespaces: bridge $(net_tag)br $(netns_prefix).1, ${NODE_PREFIX}I at \
$(netns_prefix).(1+I)"
  fi
  start_munged
  start_slurmctld
  for node in $(node_names); do
    echo "${stamp}" >>"${LOG_DIR}/slurmd-${node}.out"
    start_slurmd "${node}"
  done
  if ! wait_until "${START_TIMEOUT_S}" all_nodes_idle; then
    sinfo -N >&2 || true  # diagnostics only
    die "nodes not idle after ${START_TIMEOUT_S}s; see ${LOG_DIR}/slurmctld.log and \
${LOG_DIR}/slurmd-<node>.log"
  fi
  trap - EXIT
  log "up: $(node_names | tr '\n' ' ')(ports ${PORT_BASE}-$((PORT_BASE + nodes)))"
  log "clients: export SLURM_CONF=${SLURM_CONF_FILE}"
}

cmd_stop() {
  (($# == 0)) || usage_error "stop takes no arguments"
  local node
  if [[ -r "${NODES_FILE}" ]]; then
    for node in $(node_names); do stop_daemon "slurmd-${node}"; done
    # Step daemons and job processes of each node (slurmd does not take them down with it);
    # each node's /dev/shm goes with its last process.
    for node in $(node_names); do kill_node_namespace "${node}"; done
    if netns_on; then netns_teardown; fi
  fi
  stop_daemon slurmctld
  stop_daemon munged
  log "stopped; logs kept in ${LOG_DIR}"
}

netns_status() {  # the --netns cluster's addresses and current partitions (informational)
  local node cut=() a
  echo
  echo "network: one namespace per node, bridge $(net_tag)br $(netns_prefix).1"
  for node in $(node_names); do
    for a in $(ip -n "$(node_netns "${node}")" neigh show nud permanent 2>/dev/null | cut -d' ' -f1); do
      cut+=("${node}->$(awk -v a="${a}" '$1 == a {print $2}' "${HOSTS_FILE}")")
    done
  done
  echo "partitioned (no packets): ${cut[*]:-none}"
}

# Exit status (LSB style): 0 when every daemon is alive, 3 when the cluster is not running or
# some daemon is dead (a failed node counts), so scripts can test "is it up".
cmd_status() {
  (($# == 0)) || usage_error "status takes no arguments"
  [[ -r "${NODES_FILE}" ]] || { log "no cluster under ${STATE_DIR}"; return 3; }
  export_conf
  local name pid rc=0 shm
  printf '%-16s %-8s %-6s %s\n' DAEMON PID STATE '/DEV/SHM (USED/SIZE)'
  for name in munged slurmctld $(node_names | sed 's/^/slurmd-/'); do
    pid="$(read_pid "${name}")"
    shm=""
    if [[ "${name}" == slurmd-* ]]; then  # the node's private tmpfs, seen from inside
      shm="$(node_exec_quiet "${name#slurmd-}" df -h --output=used,size /dev/shm |
        awk 'NR == 2 {print $1 "/" $2}')" || shm="-"
    fi
    if pid_alive "${pid}"; then
      printf '%-16s %-8s %-6s %s\n' "${name}" "${pid}" alive "${shm}"
    else
      printf '%-16s %-8s %-6s %s\n' "${name}" "${pid:--}" dead "${shm}"
      rc=3
    fi
  done
  if netns_on; then netns_status; fi
  if daemon_alive slurmctld; then
    echo
    sinfo -N -o '%N %t %c %E' || true  # informational
  fi
  return "${rc}"
}

cmd_fail_node() {
  (($# == 1)) || usage_error "fail-node takes exactly one node name"
  local node="$1" pid
  check_node_name "${node}"
  pid="$(read_pid "slurmd-${node}")"
  pid_alive "${pid}" || die "slurmd of ${node} is not running (already failed?)"
  # A crash stops every process of the node at the same instant. One by one SIGKILLs are not
  # that: the /proc scan takes a while and, once pids have wrapped, goes in no particular order,
  # so a process of the node that outlives its neighbours sees them die and acts on it (seen:
  # an agent step on another node cancelled 28 ms after the batch host's first processes died,
  # most likely by an srun there whose I/O peers had gone). So first freeze the whole node
  # (slurmd first: it must not start anything new), then SIGKILL everything in its namespace,
  # children before parents (leaves_first: the kernel would otherwise wake a stopped process
  # group with SIGHUP when its parent dies). With the last process the kernel frees the
  # namespace, and so its /dev/shm tmpfs and contents.
  local ns_file="${PID_DIR}/slurmd-${node}.mntns"
  kill -STOP "${pid}" 2>/dev/null || true  # exited meanwhile: fine, the loop below checks
  if [[ -r "${ns_file}" ]]; then
    signal_node_namespace "${node}" "$(cat "${ns_file}")" STOP
    kill_node_namespace "${node}"  # slurmd included
  else
    kill -KILL "${pid}" 2>/dev/null || true  # no namespace on record: slurmd alone
  fi
  rm -f "${PID_DIR}/slurmd-${node}.pid"
  log "killed ${node} (slurmd pid ${pid} and all its step processes; its /dev/shm is gone) \
at $(date '+%T')"
}

cmd_revive_node() {
  (($# == 1)) || usage_error "revive-node takes exactly one node name"
  local node="$1" st
  check_node_name "${node}"
  daemon_alive slurmctld || die "slurmctld is not running; run '$0 start'"
  export_conf
  daemon_alive "slurmd-${node}" && die "slurmd of ${node} is running; fail it first"
  # A slurmd restarted before slurmctld noticed the crash re-registers as if nothing happened
  # and the node's jobs hang RUNNING forever (seen: >100 s, no requeue). So wait for DOWN.
  # With a long SlurmdTimeout (Slurm's default 300 s) that wait would outlast any test: mark the
  # node DOWN as an admin would after a crash (root may; the job's owner may not).
  local timeout_now
  timeout_now="$(scontrol show config 2>/dev/null | awk '$1 == "SlurmdTimeout" {print $3; exit}')"
  if ! node_is_down "${node}" && is_uint "${timeout_now}" && ((timeout_now > START_TIMEOUT_S)); then
    log "SlurmdTimeout is ${timeout_now} s: marking ${node} DOWN by hand"
    scontrol update nodename="${node}" state=down reason="local-cluster fail-node" ||
      die "could not mark ${node} DOWN (scontrol update nodename=${node} state=down)"
  fi
  if ! node_is_down "${node}"; then
    log "waiting for slurmctld to mark ${node} DOWN (up to ${START_TIMEOUT_S}s)"
    wait_until "${START_TIMEOUT_S}" node_is_down "${node}" || die "${node} not marked DOWN \
after ${START_TIMEOUT_S}s (state '$(node_state "${node}")'); see ${LOG_DIR}/slurmctld.log"
  fi
  # A real node comes back from a crash by rebooting, which clears what the dead slurmstepds
  # left behind. Here the spool and the PMIx temp dirs survive: their per-step sockets and
  # dirs (stepd.slurm.pmix.JOB.STEP, spmix_appdir_UID_JOB.STEP) would make the requeued job's
  # steps fail on this node (a requeued job keeps its id, so its step ids repeat), and the
  # batch host's job spool (jobNNNNN/slurm_script) makes the requeued batch launch fail with
  # "File exists" and Slurm hold the job for good. Empty the node's whole spool, as a reboot
  # with a node-local spool does.
  find "${SPOOL_DIR}/${node}" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
  # ... and the node's PMIx client temp dirs (/tmp on a real node).
  find "${NODES_DIR}/${node}/pmix" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
  start_slurmd "${node}"
  # ReturnToService=2 resumes it on registration; resume by hand if it was drained meanwhile.
  local deadline=$((SECONDS + START_TIMEOUT_S))
  until node_ready "${node}"; do
    ((SECONDS < deadline)) || die "${node} not back in service after ${START_TIMEOUT_S}s \
(state '$(node_state "${node}")'); see ${LOG_DIR}/slurmd-${node}.log and ${LOG_DIR}/slurmctld.log"
    st="$(node_state "${node}")"
    if [[ "${st}" =~ ^(drain|drng|down)$ ]]; then  # responding but not in service
      scontrol update nodename="${node}" state=resume 2>/dev/null || true  # retried in loop
    fi
    sleep 0.5
  done
  log "${node} back in service ($(node_state "${node}"))"
}

# pause-node / resume-node NAME: SIGSTOP / SIGCONT slurmd and every process of its jobs (a
# node that hangs without dying: its kernel still completes TCP handshakes, nothing answers).
cmd_pause_node() {  # cmd_pause_node NAME SIG
  (($# == 2)) || usage_error "pause-node / resume-node take exactly one node name"
  local node="$1" sig="$2"
  check_node_name "${node}"
  node_ns_pid "${node}" >/dev/null || die "${node} is not running (failed?)"
  signal_node_namespace "${node}" "$(cat "${PID_DIR}/slurmd-${node}.mntns")" "${sig}"
  log "$([[ "${sig}" == STOP ]] && echo paused || echo resumed) ${node} (SIG${sig} to slurmd and all its step processes) at $(date '+%T')"
}

# partition A B / heal A B (--netns clusters): cut or restore the network between two nodes,
# both ways, as a failed switch port or cable would, without a firewall: each node's neighbour
# entry for the other points at a MAC address nobody has (permanent), so their packets vanish
# on the bridge. New connections time out, established ones stall; slurmctld, the other nodes
# and the shared file system stay reachable from both. heal deletes the entries (ARP again).
cmd_partition() {  # cmd_partition A B on|off
  (($# == 3)) || usage_error "partition / heal take exactly two node names"
  local a="$1" b="$2" on="$3" x y
  check_node_name "${a}"
  check_node_name "${b}"
  [[ "${a}" != "${b}" ]] || usage_error "partition / heal need two different nodes, got ${a} twice"
  netns_on || die "this cluster shares one network namespace; partitions need one started \
with '$0 start --netns'"
  for x in "${a}" "${b}"; do
    y="$([[ "${x}" == "${a}" ]] && echo "${b}" || echo "${a}")"
    if [[ "${on}" == on ]]; then
      net_ip -n "$(node_netns "${x}")" neigh replace "$(node_addr "${y}")" \
        lladdr "$(printf '02:f7:00:00:00:%02x' "$(node_index "${y}")")" dev eth0 nud permanent
    else
      ip -n "$(node_netns "${x}")" neigh del "$(node_addr "${y}")" dev eth0 2>/dev/null ||
        true  # not partitioned (or healed already): nothing to undo
    fi
  done
  log "$([[ "${on}" == on ]] && echo "partitioned ${a} | ${b}" || echo "healed ${a} - ${b}") at $(date '+%T')"
}

# Runs CMD in NODE's mount namespace (where its jobs run: its /dev/shm, its PMIx dir), in
# the current directory; e.g. `node-exec node1 ls -l /dev/shm`. A failed node has no
# namespace left, so there is nothing to enter.
cmd_node_exec() {
  (($# >= 2)) || usage_error "node-exec takes a node name and a command"
  local node="$1"
  shift
  check_node_name "${node}"
  node_ns_pid "${node}" >/dev/null || die "${node} is not running (failed?); its namespace \
and /dev/shm are gone"
  node_exec_quiet "${node}" "$@"
}

node_exec_quiet() {  # node_exec_quiet NODE CMD...: like node-exec, fails silently if no node
  local pid
  pid="$(node_ns_pid "$1")" || return 1
  shift
  local more=()  # --netns: the node's network and host name too
  if netns_on; then more=(--net="/proc/${pid}/ns/net" --uts="/proc/${pid}/ns/uts"); fi
  nsenter --mount="/proc/${pid}/ns/mnt" "${more[@]}" --wd="${PWD}" -- "$@"
}

# Sets SlurmdTimeout and MessageTimeout of the running cluster (slurm.conf + reconfigure), e.g.
# `timeouts 300 10` for Slurm's defaults, `timeouts 5 3` for this script's; prints the old pair.
cmd_timeouts() {
  (($# == 2)) || usage_error "timeouts takes SLURMD_TIMEOUT and MESSAGE_TIMEOUT (seconds)"
  local v
  for v in "$@"; do
    if ! is_uint "${v}" || ((v < 1)); then usage_error "timeouts: '${v}' is not a number of seconds >= 1"; fi
  done
  daemon_alive slurmctld || die "slurmctld is not running; run '$0 start'"
  export_conf
  local old_s old_m
  old_s="$(awk -F= '$1 == "SlurmdTimeout" {print $2}' "${SLURM_CONF_FILE}")"
  old_m="$(awk -F= '$1 == "MessageTimeout" {print $2}' "${SLURM_CONF_FILE}")"
  sed -i -e "s/^SlurmdTimeout=.*/SlurmdTimeout=$1/" -e "s/^MessageTimeout=.*/MessageTimeout=$2/" \
    "${SLURM_CONF_FILE}"
  scontrol reconfigure || die "scontrol reconfigure failed; see ${LOG_DIR}/slurmctld.log"
  wait_until 10 timeouts_are "$1" "$2" || die "slurmctld did not take SlurmdTimeout=$1 \
MessageTimeout=$2; see ${LOG_DIR}/slurmctld.log"
  echo "${old_s} ${old_m}"
}

timeouts_are() {  # timeouts_are SLURMD_TIMEOUT MESSAGE_TIMEOUT: slurmctld runs with them
  local got
  got="$(scontrol show config 2>/dev/null |
    awk '$1 == "SlurmdTimeout" {s = $3} $1 == "MessageTimeout" {m = $3} END {print s, m}')"
  [[ "${got}" == "$1 $2" ]]
}

cmd_env() {
  (($# == 0)) || usage_error "env takes no arguments"
  printf 'export SLURM_CONF=%q\n' "${SLURM_CONF_FILE}"
}

main() {
  (($#)) || usage_error "missing subcommand"
  [[ "${STATE_DIR}" != *[[:space:]]* ]] || die "state dir must not contain whitespace: \
'${STATE_DIR}' (set FTRAIN_CLUSTER_DIR)"
  local sub="$1"; shift
  case "${sub}" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    fail-node) cmd_fail_node "$@" ;;
    revive-node) cmd_revive_node "$@" ;;
    node-exec) cmd_node_exec "$@" ;;
    env) cmd_env "$@" ;;
    timeouts) cmd_timeouts "$@" ;;
    pause-node) cmd_pause_node "$@" STOP ;;
    resume-node) cmd_pause_node "$@" CONT ;;
    partition) cmd_partition "$@" on ;;
    heal) cmd_partition "$@" off ;;
    -h | --help | help) usage ;;
    *) usage_error "unknown subcommand '${sub}'" ;;
  esac
}

main "$@"
