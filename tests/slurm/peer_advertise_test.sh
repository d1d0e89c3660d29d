#!/usr/bin/env bash
# peer_advertise_test.sh - buddy replication publishes the network it is told to, and every
# daemon checks at start that its buddy's published address resolves and answers. On the
# local cluster, a 2-node job runs only the node agents (slurm/agent.sh, FTRAIN_REPLICATION=1;
# no trainer):
#   1. FTRAIN_PEER_ADVERTISE=<a non-loopback interface of this host>: both daemons publish
#      that interface's address, and each logs that its buddy resolves and answers;
#   2. the listener bound to the host name (loopback here) but the same interface advertised:
#      nothing answers there, and each daemon warns, naming the buddy's published address.
# Takes ~20 s (no training). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="peer_advertise_test"
IDLE_TIMEOUT_S=90       # cluster idle before the test
CHECK_TIMEOUT_S=60      # for both daemons' check verdicts

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
BIN="${FTRAIN_BIN_DIR:-${SLURM_TEST_REPO_ROOT}/build/bin}"

JOB_ID=""
WORK_DIR=""
PASSED=0
cleanup() {
  local rc=$?
  cancel_job "${JOB_ID}"
  work_dir_cleanup
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ -x "${BIN}/ckptd" && -x "${BIN}/ftrain" ]] || fail "no ckptd/ftrain in ${BIN}; build first"
iface="$(ip -o -4 addr show 2>/dev/null | awk '$2 != "lo" {print $2; exit}')"
[[ -n "${iface}" ]] || skip "this host has no IPv4 interface other than lo"
iface_ip="$(ip -o -4 addr show dev "${iface}" | awk '{sub(/\/.*/, "", $4); print $4; exit}')"
cluster_require
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 2)) || skip "needs a cluster of 2 nodes, have ${#nodes[@]}"
wait_for_nodes_idle "${IDLE_TIMEOUT_S}"
WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-${SLURM_TEST_NAME}.XXXXXX")"

# Runs the agents of a 2-node job in RUN with the given extra environment; waits until both
# daemons logged their buddy check. Sets JOB_ID.
run_agents() {  # run_agents RUN VAR=VALUE...
  local run="$1" secret
  shift
  mkdir -p "${run}"
  secret="$("${BIN}/ftrain" paths "${run}" --get replication_secret)"
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"${secret}")
  JOB_ID="$(env "$@" FTRAIN_RUN_DIR="${run}" FTRAIN_REPLICATION=1 FTRAIN_HOME="${SLURM_TEST_REPO_ROOT}" \
    FTRAIN_BIN="${BIN}/ftrain" CKPTD_BIN="${BIN}/ckptd" \
    sbatch --parsable --nodes=2 --job-name="${SLURM_TEST_NAME}" --output="${run}/job.out" \
    --export=ALL --wrap "srun --nodes=2 --ntasks-per-node=1 --mpi=none bash \
${SLURM_TEST_REPO_ROOT}/slurm/agent.sh")"
  log "job ${JOB_ID}: agents in ${run} ($*)"
  wait_for "${CHECK_TIMEOUT_S}" "both daemons' buddy checks in ${run}/logs" checked "${run}"
}
checked() {  # both daemon logs have a verdict
  local n=0 f
  for f in "$1"/logs/ckptd-*.log; do
    [[ -e "${f}" ]] || continue
    grep -E 'resolves and answers|WARNING: the buddy' "${f}" >/dev/null && n=$((n + 1))
  done
  ((n >= 2))
}
stop_agents() {
  cancel_job "${JOB_ID}"
  wait_for 60 "job ${JOB_ID} to end" job_state_matches "${JOB_ID}" 'COMPLETED|CANCELLED|FAILED|'
  JOB_ID=""
}

# 1. The advertised interface, listened on (all interfaces by default): both checks pass.
run_agents "${WORK_DIR}/good" FTRAIN_PEER_ADVERTISE="${iface}"
for f in "${WORK_DIR}"/good/ckptd-*/peer-addr; do
  [[ "$(head -n1 "${f}")" == "${iface_ip}:"* ]] ||
    fail "${f} publishes '$(head -n1 "${f}")', not ${iface}'s address ${iface_ip}"
done
for f in "${WORK_DIR}"/good/logs/ckptd-*.log; do
  grep "buddy ${iface_ip}:.* resolves and answers as a daemon of this job" "${f}" >/dev/null ||
    fail "${f} has no passed buddy check: $(grep -i buddy "${f}" | tail -n3)"
done
log "advertise ${iface} (${iface_ip}): both daemons publish it and their buddy checks pass"
stop_agents

# 2. Listening on the host name (loopback here) but advertising the interface: each daemon
# warns at start, naming its buddy's published address and the file it came from.
run_agents "${WORK_DIR}/bad" FTRAIN_PEER_ADVERTISE="${iface}" FTRAIN_PEER_HOST="$(hostname)"
for f in "${WORK_DIR}"/bad/logs/ckptd-*.log; do
  line="$(grep "WARNING: the buddy's peer address '${iface_ip}:[0-9]*' (from ${WORK_DIR}/bad/ckptd-.*/buddy-addr) does not answer as a daemon of this job" "${f}")" ||
    fail "${f} has no warning naming the buddy's address: $(grep -i buddy "${f}" | tail -n3)"
  [[ "${line}" == *FTRAIN_PEER_ADVERTISE* ]] || fail "the warning does not say what to set: ${line}"
done
log "a published address nothing answers at: both daemons warn at start, naming it"
stop_agents
PASSED=1
log "PASS"
