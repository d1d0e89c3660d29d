#!/usr/bin/env bash
# node_shm_test.sh - a node's shared memory dies with it on the local Slurm cluster: each node
# has its own /dev/shm (a tmpfs in its mount namespace). A segment that a job step on node X
# creates in /dev/shm (a file there is what shm_open(3) makes; ckptd's snapshot slots are
# such segments) is seen by a later step on X, but not by a step on node Y nor by the host;
# after `fail-node X` + `revive-node X`, X's /dev/shm is empty while Y's segment survives.
# Takes a few seconds (no training job). Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="node_shm_test"
IDLE_TIMEOUT_S=60       # cluster idle before the test
SEG="ftrain-node-shm-test-$$"   # the segment's name in /dev/shm

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

FAILED_NODE=""          # set while a node is down because of this test
X=""
Y=""
cleanup() {
  local rc=$? n
  if [[ -n "${FAILED_NODE}" ]]; then
    "${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}" >/dev/null ||
      log "cleanup: revive-node ${FAILED_NODE} failed; restart the cluster"  # keep rc
  fi
  for n in ${X} ${Y}; do  # the segments live until the node dies: remove ours
    step_on_node "${n}" rm -f "/dev/shm/${SEG}" 2>/dev/null || true  # best effort
  done
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cluster_require
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 2)) || fail "need a cluster with >= 2 nodes, have: ${nodes[*]}"
wait_for_nodes_idle "${IDLE_TIMEOUT_S}"
X="${nodes[1]}"
Y="${nodes[0]}"
t0="$(now_s)"

# Each node's /dev/shm is a tmpfs of its own, world-writable and sticky like a real one.
shm_of() {  # shm_of NODE: "<device> <mode> <fs type>" of /dev/shm as a job on NODE sees it
  # shellcheck disable=SC2016  # expands in the step's shell, on purpose
  step_on_node "$1" sh -c 'echo "$(stat -c "%d %a" /dev/shm) $(stat -f -c %T /dev/shm)"'
}
shm_x="$(shm_of "${X}")" || fail "cannot run a step on ${X}"
shm_y="$(shm_of "${Y}")" || fail "cannot run a step on ${Y}"
shm_host="$(stat -c '%d' /dev/shm)"
log "/dev/shm (device mode type): ${X} ${shm_x}; ${Y} ${shm_y}; host ${shm_host}"
[[ "${shm_x#* }" == "1777 tmpfs" && "${shm_y#* }" == "1777 tmpfs" ]] ||
  fail "a node's /dev/shm is not a mode-1777 tmpfs: ${X} '${shm_x}', ${Y} '${shm_y}'"
dev_x="${shm_x%% *}"
dev_y="${shm_y%% *}"
[[ "${dev_x}" != "${dev_y}" && "${dev_x}" != "${shm_host}" && "${dev_y}" != "${shm_host}" ]] ||
  fail "the nodes' /dev/shm are not separate file systems (devices ${dev_x}, ${dev_y}, host ${shm_host})"

# A segment made by one step on X is there for the next step on X, and nowhere else.
token_x="x-$$-${RANDOM}"
token_y="y-$$-${RANDOM}"
make_segment() {  # make_segment NODE TOKEN: a step on NODE writes TOKEN into /dev/shm/SEG
  # shellcheck disable=SC2016  # $1 and $2 expand in the step's shell, on purpose
  step_on_node "$1" sh -c 'echo "$1" >"/dev/shm/$2"' sh "$2" "${SEG}" ||
    fail "a step on $1 could not create /dev/shm/${SEG}"
}
make_segment "${X}" "${token_x}"
make_segment "${Y}" "${token_y}"
got="$(step_on_node "${X}" cat "/dev/shm/${SEG}")" || fail "a second step on ${X} does not see /dev/shm/${SEG}"
[[ "${got}" == "${token_x}" ]] || fail "a second step on ${X} reads '${got}', want '${token_x}' (${X}'s own)"
got="$(step_on_node "${Y}" cat "/dev/shm/${SEG}")" || fail "a second step on ${Y} does not see /dev/shm/${SEG}"
[[ "${got}" == "${token_y}" ]] || fail "a step on ${Y} reads '${got}', want '${token_y}': it sees ${X}'s segment"
[[ ! -e "/dev/shm/${SEG}" ]] || fail "the host sees /dev/shm/${SEG}: the nodes share the host's /dev/shm"
log "a segment of ${X} is seen by later steps on ${X} only (not by ${Y}, which has its own, nor the host)"

# X crashes: its memory goes with it; the survivor Y keeps its own.
FAILED_NODE="${X}"
"${LOCAL_CLUSTER}" fail-node "${X}" >/dev/null
if "${LOCAL_CLUSTER}" node-exec "${X}" true 2>/dev/null; then
  fail "${X} still has a mount namespace after fail-node"
fi
# No job runs on X, so tell slurmctld now instead of waiting ~11 s for its ping timeout
# (revive-node waits for DOWN; the node failure path itself is requeue_test's business).
scontrol update nodename="${X}" state=down reason="${SLURM_TEST_NAME}: fail-node"
"${LOCAL_CLUSTER}" revive-node "${X}" >/dev/null
FAILED_NODE=""
left="$(step_on_node "${X}" ls -A /dev/shm)" || fail "cannot run a step on the revived ${X}"
[[ -z "${left}" ]] || fail "the revived ${X} has a /dev/shm that is not empty: ${left//$'\n'/ }"
got="$(step_on_node "${Y}" cat "/dev/shm/${SEG}")" || fail "the survivor ${Y} lost /dev/shm/${SEG}"
[[ "${got}" == "${token_y}" ]] || fail "the survivor ${Y} reads '${got}', want '${token_y}'"
log "PASS: after fail-node + revive-node ${X} has an empty /dev/shm, ${Y} kept its segment \
($(elapsed_s "${t0}" "$(now_s)") s)"
