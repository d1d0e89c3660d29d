#!/usr/bin/env bash
# requeue_test.sh - a 2-node `sbatch --requeue` job survives the crash of a node: Slurm marks the
# node DOWN, requeues the job, and after the node is revived the job runs again with
# SLURM_RESTART_COUNT=1 and completes; then every node is idle again. Prints the timings.
# Expects the cluster of slurm/local-cluster.sh to be running (the test driver starts it);
# SLURM_CONF comes from the environment or from `local-cluster.sh env`. Run tests serially:
# this one kills a node of the shared cluster. Exit 0 pass, 1 fail, 77 skip (no Slurm tools).
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="requeue_test"
IDLE_TIMEOUT_S=60       # cluster idle before and after the test
START_TIMEOUT_S=60      # first run starts and its step is running
DETECT_TIMEOUT_S=90     # node crash -> node DOWN and job requeued (SlurmdTimeout + pings)
RERUN_TIMEOUT_S=90      # node revived -> second run started (includes the cred_expire wait)
FINISH_TIMEOUT_S=60     # second run started -> job COMPLETED
FIRST_RUN_SLEEP_S=600   # the first run only ends by the node failure
JOB_TIME_LIMIT_MIN=15   # sbatch --time, a backstop

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

JOB_ID=""
FAILED_NODE=""          # set while a node is down because of this test
PASSED=0
WORK_DIR=""

cleanup() {
  local rc=$?
  cancel_job "${JOB_ID}"
  if [[ -n "${FAILED_NODE}" ]]; then
    log "cleanup: reviving ${FAILED_NODE}"
    "${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}" ||
      log "cleanup: revive-node ${FAILED_NODE} failed; restart the cluster"  # keep rc
  fi
  work_dir_cleanup
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cluster_require
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 2)) || fail "need a cluster with >= 2 nodes, have: ${nodes[*]}"
wait_for_nodes_idle "${IDLE_TIMEOUT_S}"

# The job dir must be visible to the job: /tmp is shared by all local "nodes".
WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-requeue.XXXXXX")"
RUNS_FILE="${WORK_DIR}/runs"   # one line per run: RESTART_COUNT EPOCH_SECONDS BATCH_NODE
JOB_SCRIPT="${WORK_DIR}/job.sh"
cat >"${JOB_SCRIPT}" <<EOF
#!/usr/bin/env bash
# Written by requeue_test.sh. First run: a 2-node step that sleeps until a node dies.
# Restart: record and exit 0.
set -uo pipefail
restarts="\${SLURM_RESTART_COUNT:-0}"
echo "\${restarts} \$(date '+%s.%N') \${SLURMD_NODENAME}" >>"${RUNS_FILE}"
echo "run with SLURM_RESTART_COUNT=\${restarts} on \${SLURMD_NODENAME} (\${SLURM_JOB_NODELIST})"
if [[ "\${restarts}" == "0" ]]; then
  srun --mpi=pmix --nodes=2 --ntasks=2 --ntasks-per-node=1 sleep ${FIRST_RUN_SLEEP_S}
  echo "srun exited with \$? (expected: killed by the requeue before this line)"
  # Do not end the job ourselves: only Slurm's node-failure handling may end this run.
  sleep ${FIRST_RUN_SLEEP_S}
fi
exit 0
EOF
chmod +x "${JOB_SCRIPT}"

JOB_ID="$(sbatch --parsable --job-name=ftrain-requeue-test --nodes=2 --ntasks=2 \
  --ntasks-per-node=1 --requeue --open-mode=append --output="${WORK_DIR}/job-%j.out" \
  --time="${JOB_TIME_LIMIT_MIN}" --chdir="${WORK_DIR}" "${JOB_SCRIPT}")" ||
  fail "sbatch failed"
log "submitted job ${JOB_ID} (work dir ${WORK_DIR})"

wait_for_job_state "${JOB_ID}" RUNNING "${START_TIMEOUT_S}"
wait_for_job_step "${JOB_ID}" 0 "${START_TIMEOUT_S}"
wait_for_file_lines "${RUNS_FILE}" 1 "${START_TIMEOUT_S}"
batch_host="$(job_field "${JOB_ID}" BatchHost)"
victim=""
for n in $(job_nodes "${JOB_ID}"); do
  if [[ "${n}" != "${batch_host}" ]]; then victim="${n}"; break; fi
done
[[ -n "${victim}" ]] || fail "job ${JOB_ID} has no node besides batch host ${batch_host}"
log "first run is up (batch host ${batch_host}); crashing ${victim}"

t_fail="$(now_s)"
FAILED_NODE="${victim}"
"${LOCAL_CLUSTER}" fail-node "${victim}"

job_restarts_at_least_one() { [[ "$(job_field "${JOB_ID}" Restarts)" -ge 1 ]]; }
wait_for_node_state "${victim}" 'down\*?' "${DETECT_TIMEOUT_S}"
t_down="$(now_s)"
wait_for "${DETECT_TIMEOUT_S}" "job ${JOB_ID} requeued (Restarts >= 1)" job_restarts_at_least_one
t_requeued="$(now_s)"
log "${victim} DOWN after $(elapsed_s "${t_fail}" "${t_down}")s, job requeued after \
$(elapsed_s "${t_fail}" "${t_requeued}")s (state $(job_state "${JOB_ID}"))"

"${LOCAL_CLUSTER}" revive-node "${victim}"
FAILED_NODE=""
t_revived="$(now_s)"

wait_for_file_lines "${RUNS_FILE}" 2 "${RERUN_TIMEOUT_S}"
wait_for_job_state "${JOB_ID}" COMPLETED "${FINISH_TIMEOUT_S}"
[[ "$(job_field "${JOB_ID}" ExitCode)" == "0:0" ]] ||
  fail "job ${JOB_ID} exit code $(job_field "${JOB_ID}" ExitCode), want 0:0"

mapfile -t runs <"${RUNS_FILE}"
((${#runs[@]} == 2)) || fail "expected 2 runs in ${RUNS_FILE}, got ${#runs[@]}: ${runs[*]}"
read -r count0 _ _ <<<"${runs[0]}"
read -r count1 t_second _ <<<"${runs[1]}"
[[ "${count0}" == "0" ]] || fail "first run saw SLURM_RESTART_COUNT=${count0}, want 0"
[[ "${count1}" == "1" ]] || fail "second run saw SLURM_RESTART_COUNT=${count1}, want 1"

wait_for_nodes_idle "${IDLE_TIMEOUT_S}"

log "timings from fail-node: node DOWN $(elapsed_s "${t_fail}" "${t_down}")s, requeued \
$(elapsed_s "${t_fail}" "${t_requeued}")s, revived $(elapsed_s "${t_fail}" "${t_revived}")s, \
second run started $(elapsed_s "${t_fail}" "${t_second}")s"
log "PASS"
PASSED=1
