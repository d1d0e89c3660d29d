#!/usr/bin/env bash
# train_partition_test.sh - split brain: a network partition between the two training nodes of
# a job with a hot spare, on a local cluster with one network namespace per node (its own,
# started here with `local-cluster.sh start --netns`, stopped at exit; or the cluster of
# SLURM_CONF if that is a --netns one). The batch host (the spare) and slurmctld reach both
# sides, the shared run directory too: only the two nodes cannot reach each other.
# What is correct:
#   - neither node is dead, so neither is declared dead: their agents' heartbeats go through
#     the run directory and their slurmds answer the batch host's probes; no node_failure, the
#     spare stays idle, the job is not requeued;
#   - no side trains alone: no step after the one in flight at the cut completes, and no
#     checkpoint of such a step is committed, while the partition lasts (every step needs
#     both nodes' collectives);
#   - the stalled collective fails after dist.timeout_s (5 s here, set only for this job), the
#     step ends with exit 1, train.sh restarts it in place (a rank failure on healthy nodes:
#     bounded, FTRAIN_MAX_INJOB_RESTARTS, then a requeue); the partition lasts longer than the
#     heartbeat threshold (FTRAIN_HEARTBEAT_TIMEOUT_S, 3 s) and is healed once the restart is
#     recorded;
#   - the restarted step resumes from the newest checkpoint with a new generation; nothing of
#     the old one (ranks, daemons woken by the heal) commits after it: every checkpoint after
#     the resume carries the new generation, every checkpoint verifies, and the run ends
#     bit-identical to the uninterrupted reference.
# Exit 0 pass, 1 fail, 77 skip (no network namespaces here, or not root).
set -euo pipefail

SLURM_TEST_NAME="train_partition_test"
# The pause test's settings: the cached reference is shared with it.
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
PARTITION_AT_STEP=12
OP_TIMEOUT_S=5  # dist.timeout_s of the job: a stalled collective fails after this

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"

# ---- the cluster: one with per-node network namespaces -----------------------------------------
OWN_CLUSTER=""
PARTITIONED=0
[[ "$(id -u)" == 0 ]] || skip "needs root (network namespaces)"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
unshare --net true 2>/dev/null || skip "cannot create a network namespace here (unshare --net failed)"
if [[ -z "${SLURM_CONF:-}" || ! -s "$(dirname "${SLURM_CONF}")/netns" ]]; then
  base="${FTRAIN_CLUSTER_PORT_BASE:-16817}"
  export FTRAIN_CLUSTER_PORT_BASE="${FTRAIN_TEST_NETNS_PORT_BASE:-$((base + 100))}"
  export FTRAIN_CLUSTER_DIR="${TMPDIR:-/tmp}/ftrain-netns-${FTRAIN_CLUSTER_PORT_BASE}"
  export FTRAIN_CLUSTER_MUNGE_DIR="/run/ftrain-munge-${FTRAIN_CLUSTER_PORT_BASE}"  # removed at exit
  OWN_CLUSTER="${FTRAIN_CLUSTER_DIR}"
  log "starting a --netns cluster of 3 nodes in ${OWN_CLUSTER} (ports from ${FTRAIN_CLUSTER_PORT_BASE})"
  "${LOCAL_CLUSTER}" start --nodes 3 --cpus-per-node 2 --netns >/dev/null ||
    fail "local-cluster.sh start --netns failed (above)"
  eval "$("${LOCAL_CLUSTER}" env)"
else
  FTRAIN_CLUSTER_DIR="$(dirname "$(dirname "${SLURM_CONF}")")"
  export FTRAIN_CLUSTER_DIR
fi
# e2e.sh's cleanup, preceded by the heal and the stop of this test's own cluster (e2e_setup
# installs e2e_cleanup as the EXIT trap, so it is wrapped, not replaced).
eval "e2e_cleanup_base() $(declare -f e2e_cleanup | tail -n +2)"
e2e_cleanup() {
  local rc=$?
  ((!PARTITIONED)) || "${LOCAL_CLUSTER}" heal "${nodes[1]}" "${nodes[2]}" >/dev/null || true
  if [[ -n "${OWN_CLUSTER}" ]]; then
    cancel_job "${JOB_ID}"
    JOB_ID=""
    "${LOCAL_CLUSTER}" stop >/dev/null || log "cleanup: local-cluster.sh stop failed"
    rm -rf "${OWN_CLUSTER}" "${FTRAIN_CLUSTER_MUNGE_DIR}"
  fi
  set +e  # (exit N) below must not end the trap
  (exit "${rc}")
  e2e_cleanup_base
}
trap e2e_cleanup EXIT

e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a --netns cluster of 3 nodes, have ${#nodes[@]}"
export FTRAIN_ARGS="${E2E_TRAIN_ARGS} --dist.timeout_s=${OP_TIMEOUT_S}"  # no bit depends on it

export FTRAIN_SPARE_NODES=1 FTRAIN_SPARE_NODELIST="${nodes[0]}"
JOB_ID="$(e2e_submit part --nodes=3 --no-kill)"
run="${WORK_DIR}/part"
wait_for_job_state "${JOB_ID}" RUNNING 60
[[ "$(job_field "${JOB_ID}" BatchHost)" == "${nodes[0]}" ]] ||
  fail "the batch host is $(job_field "${JOB_ID}" BatchHost), not the spare ${nodes[0]}"
wait_for_file_lines "${run}/metrics.jsonl" "${PARTITION_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
# Cut while the ranks are frozen (the tiny run would otherwise end first).
e2e_freeze_ranks part
PARTITIONED=1
"${LOCAL_CLUSTER}" partition "${nodes[1]}" "${nodes[2]}"
t_part="$(now_s)"
steps_at_cut="$(wc -l <"${run}/metrics.jsonl")"
ckpt_at_cut="$("${E2E_BIN}/ckptctl" latest "${run}/checkpoints" 2>/dev/null || true)"
e2e_thaw_ranks part
wait_for 60 "the in-place restart after the stalled collective" \
  grep -q '"event":"restarted","cause":"rank_failure"' "${run}/restarts.jsonl"
t_restart="$(now_s)"
steps_in_cut="$(wc -l <"${run}/metrics.jsonl")"
ckpt_in_cut="$("${E2E_BIN}/ckptctl" latest "${run}/checkpoints" 2>/dev/null || true)"
"${LOCAL_CLUSTER}" heal "${nodes[1]}" "${nodes[2]}"
PARTITIONED=0
held="$(elapsed_s "${t_part}" "$(now_s)")"
log "partitioned ${nodes[1]} | ${nodes[2]} for ${held} s; the step was restarted in place $(elapsed_s "${t_part}" "${t_restart}") s after the cut"
e2e_wait_done "${JOB_ID}" part

# The partition outlasted the detection threshold (the heartbeat timeout, 3 s by default).
awk -v h="${held}" -v t="${FTRAIN_HEARTBEAT_TIMEOUT_S:-3}" 'BEGIN { exit !(h > t + 1) }' ||
  fail "the partition lasted only ${held} s, not longer than the heartbeat threshold"
# No side trained alone: during the cut no step completed but the one in flight when it came
# (its collectives may all have been done), and no checkpoint of a later step was committed
# (one handed to the daemons before the cut may be: that needs no network between the nodes).
# A resumed trainer drops lines after its checkpoint, so the count is read during the cut.
((steps_in_cut <= steps_at_cut + 1)) ||
  fail "steps completed during the partition (${steps_at_cut} -> ${steps_in_cut} lines in metrics.jsonl)"
ckpt_step="${ckpt_in_cut##*step-}"
[[ -z "${ckpt_in_cut}" || "${ckpt_in_cut}" == "${ckpt_at_cut}" ]] || ((10#${ckpt_step} <= steps_at_cut + 1)) ||
  fail "a checkpoint of a step after the cut was committed during the partition (${ckpt_at_cut} -> ${ckpt_in_cut})"
# Nobody declared dead, nothing moved to the spare, no requeue; bounded in-place restarts.
if grep -q '"cause":"node_failure"' "${run}/restarts.jsonl"; then
  fail "a partitioned (live) node was treated as failed: $(grep node_failure "${run}/restarts.jsonl")"
fi
grep -q 'declared \(dead\|hung\)' "${WORK_DIR}"/part-*.out && fail "train.sh declared a live node dead: $(grep declared "${WORK_DIR}"/part-*.out)"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued"
restarts="$(grep -c '"event":"restarted","cause":"rank_failure"' "${run}/restarts.jsonl")"
((restarts >= 1 && restarts <= ${FTRAIN_MAX_INJOB_RESTARTS:-2})) ||
  fail "${restarts} in-place restarts (expected 1..${FTRAIN_MAX_INJOB_RESTARTS:-2})"
# Fencing: after the restart only the new start's generation commits.
gen="$(grep -ho 'checkpoint generation [0-9a-f-]*' "${WORK_DIR}"/part-*.out | tail -n 1 | cut -d' ' -f3)"
[[ -n "${gen}" ]] || fail "no 'checkpoint generation' line in ${WORK_DIR}/part-*.out"
resume_step="$(sed -n '/"event":"restarted"/,$p' "${run}/restarts.jsonl" | grep -o '"event":"resumed".*' |
  tail -n 1 | sed -E 's/.*"step":([0-9]+),.*/\1/')"
[[ -n "${resume_step}" ]] || fail "no resumed record after the restart"
for d in "${run}"/checkpoints/step-*; do
  [[ -f "${d}/manifest.json" ]] || continue
  step=$((10#${d##*step-}))
  ((step > resume_step)) || continue
  g="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "${d}/manifest.json")"
  [[ "${g}" == "${gen}" ]] || fail "checkpoint ${d} (after the resume at step ${resume_step}) has generation ${g}, not the last start's ${gen}"
done
e2e_expect_identical part
log "PASS: ${nodes[1]} | ${nodes[2]} partitioned ${held} s: nobody declared dead, no step or checkpoint during the cut, ${restarts} in-place restart(s), generation ${gen} fenced, bit-identical"
PASSED=1
