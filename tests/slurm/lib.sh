#!/usr/bin/env bash
# lib.sh - helpers shared by the Slurm tests in tests/slurm/ (source it; it runs nothing).
# They talk to the local cluster of slurm/local-cluster.sh: bounded polling of job / node state,
# job fields, timing. Every wait fails with a message naming what it waited for and where the
# logs are. It does not start or stop the cluster; the test driver does that.
# Requires: bash, `set -euo pipefail` in the caller.

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SLURM_TEST_REPO_ROOT="$(cd "${SLURM_TEST_LIB_DIR}/../.." && pwd)"
LOCAL_CLUSTER="${SLURM_TEST_REPO_ROOT}/slurm/local-cluster.sh"
SLURM_TEST_POLL_S=0.25        # polling period of every wait_* helper
SLURM_TEST_SKIP_RC=77         # exit code for "cannot run here" (ctest SKIP_RETURN_CODE)
SLURM_TEST_STEP_TIMEOUT_S=60  # bound on one step_on_node

# ---- messages ------------------------------------------------------------------------------
log() { echo "[$(date '+%T')] ${SLURM_TEST_NAME:-slurm-test}: $*"; }
fail() {
  echo "[$(date '+%T')] ${SLURM_TEST_NAME:-slurm-test}: FAIL: $*" >&2
  echo "  cluster logs: $(cluster_log_dir)" >&2
  exit 1
}
skip() { echo "${SLURM_TEST_NAME:-slurm-test}: SKIP: $*" >&2; exit "${SLURM_TEST_SKIP_RC}"; }

# ---- cluster -------------------------------------------------------------------------------
cluster_log_dir() { echo "$(dirname "$(dirname "${SLURM_CONF:-/nonexistent/etc/x}")")/log"; }

# Make SLURM_CONF point at the local cluster (unless the caller already set it) and check that
# slurmctld answers. Skips when the Slurm client tools are not installed at all.
cluster_require() {
  command -v sbatch >/dev/null || skip "Slurm client tools (sbatch) not installed"
  if [[ -z "${SLURM_CONF:-}" ]]; then
    eval "$("${LOCAL_CLUSTER}" env)"
  fi
  export SLURM_CONF
  [[ -r "${SLURM_CONF}" ]] || fail "SLURM_CONF=${SLURM_CONF} does not exist; start the \
cluster with: ${LOCAL_CLUSTER} start"
  scontrol ping 2>/dev/null | grep -q 'is UP' || fail "slurmctld of ${SLURM_CONF} is not \
answering; start the cluster with: ${LOCAL_CLUSTER} start"
}

cluster_nodes() { sinfo -h -N -o '%N' | sort -u; }

# Value of one slurm.conf setting as slurmctld sees it, e.g. config_value SlurmdTimeout.
config_value() { scontrol show config | awk -v k="$1" '$1 == k {print $3; exit}'; }

# ---- time ----------------------------------------------------------------------------------
now_s() { date '+%s.%N'; }
elapsed_s() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }  # elapsed_s FROM TO

# ---- generic wait --------------------------------------------------------------------------
# poll_until TIMEOUT_S CMD...: poll CMD until it succeeds; returns 1 after TIMEOUT_S.
poll_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep "${SLURM_TEST_POLL_S}"
  done
}

# wait_for TIMEOUT_S DESCRIPTION CMD...: like poll_until, but fails the test on timeout.
wait_for() {
  local timeout_s="$1" what="$2"
  shift 2
  poll_until "${timeout_s}" "$@" || fail "timed out after ${timeout_s}s waiting for ${what}"
}

# ---- jobs ----------------------------------------------------------------------------------
# job_field JOBID FIELD: one field of `scontrol show job` (e.g. JobState, Restarts, BatchHost).
job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | awk -F= -v k="$2" \
    '$1 == k {sub(/^[^=]*=/, ""); print; exit}'
}

job_state() { job_field "$1" JobState; }

job_state_matches() { [[ "$(job_state "$1")" =~ ^($2)$ ]]; }  # job_state_matches JOBID REGEX

# wait_for_job_state JOBID STATE_REGEX TIMEOUT_S, e.g. wait_for_job_state 7 'RUNNING' 30
wait_for_job_state() {
  poll_until "$3" job_state_matches "$1" "$2" ||
    fail "timed out after $3s waiting for job $1 in state $2 (last: $(job_state "$1"))"
}

# Does job JOBID have a running step STEP (e.g. 0)? squeue -s lists "JOBID.STEP".
job_step_running() { squeue -h -s -j "$1" -o '%i' 2>/dev/null | grep -qx "$1\.$2"; }

wait_for_job_step() {  # wait_for_job_step JOBID STEP TIMEOUT_S
  wait_for "$3" "step $1.$2 running" job_step_running "$1" "$2"
}

# Nodes of the job, one per line (expands node[1-2]).
job_nodes() {
  local list
  list="$(job_field "$1" NodeList)"
  [[ -n "${list}" && "${list}" != "(null)" ]] || return 0
  scontrol show hostnames "${list}"
}

cancel_job() {  # cancel_job JOBID: best effort, for traps
  [[ -n "${1:-}" ]] || return 0
  scancel "$1" 2>/dev/null || true  # already gone is fine
}

# ---- nodes ---------------------------------------------------------------------------------
node_state() { sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n1; }  # e.g. idle, down*, alloc

node_state_matches() { [[ "$(node_state "$1")" =~ ^($2)$ ]]; }  # node_state_matches NODE REGEX

# wait_for_node_state NODE STATE_REGEX TIMEOUT_S, e.g. wait_for_node_state node2 'down\*?' 60
wait_for_node_state() {
  poll_until "$3" node_state_matches "$1" "$2" ||
    fail "timed out after $3s waiting for node $1 in state $2 (last: $(node_state "$1"))"
}

all_nodes_idle() {
  local n
  for n in $(cluster_nodes); do [[ "$(node_state "${n}")" == "idle" ]] || return 1; done
}

# A node that an earlier test left drained because a step of it outlived Slurm's
# UnkillableStepTimeout (reason "Kill task failed") goes back in service, loudly: one test's
# leftover must not fail every test after it.
resume_kill_task_failed() {
  local n
  for n in $(sinfo -h -N -o '%N|%E' 2>/dev/null | awk -F'|' '$2 == "Kill task failed" {print $1}'); do
    log "node ${n} was drained by Slurm (Kill task failed: a step outlived UnkillableStepTimeout); resuming it"
    scontrol update NodeName="${n}" State=RESUME || log "cannot resume ${n}"
  done
}

wait_for_nodes_idle() {  # wait_for_nodes_idle TIMEOUT_S
  resume_kill_task_failed
  poll_until "$1" all_nodes_idle ||
    fail "timed out after $1s waiting for all nodes idle (last: $(sinfo -h -N -o '%N=%t' |
      paste -sd' '))"
}

# step_on_node NODE CMD...: runs CMD as one task on NODE (a job of its own, no MPI), so it
# sees what a job sees there (e.g. the node's private /dev/shm); its exit status, bounded.
step_on_node() {
  timeout "${SLURM_TEST_STEP_TIMEOUT_S}" srun --nodelist="$1" --nodes=1 --ntasks=1 --mpi=none \
    --quiet --job-name="${SLURM_TEST_NAME:-slurm-test}" "${@:2}"
}

# ---- a test's work directory ---------------------------------------------------------------
# slurm_test_start IDLE_TIMEOUT_S: the usual start of a test without the e2e corpus: the
# cluster answering, every node idle, and WORK_DIR a fresh directory of its own. The caller sets
# WORK_DIR="" and PASSED=0 before its EXIT trap, which calls work_dir_cleanup.
slurm_test_start() {
  cluster_require
  wait_for_nodes_idle "$1"
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-${SLURM_TEST_NAME:-slurm-test}.XXXXXX")"
}

# For the EXIT trap: WORK_DIR removed when the test passed (PASSED=1), kept and named otherwise.
work_dir_cleanup() {
  if ((PASSED)); then rm -rf "${WORK_DIR}"; elif [[ -n "${WORK_DIR}" ]]; then
    log "kept work dir for inspection: ${WORK_DIR}"
  fi
}

# ---- files ---------------------------------------------------------------------------------
file_has_lines() { [[ -r "$1" ]] && (($(wc -l <"$1") >= $2)); }  # file_has_lines FILE N

wait_for_file_lines() {  # wait_for_file_lines FILE N TIMEOUT_S
  wait_for "$3" "$2 line(s) in $1" file_has_lines "$1" "$2"
}
