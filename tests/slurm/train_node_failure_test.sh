#!/usr/bin/env bash
# train_node_failure_test.sh - the product's promise end to end on the local Slurm cluster:
# `sbatch slurm/train.sh` (2 nodes x 2 ranks, tiny model, hybrid sharding, checkpoints every
# 5 steps) trains to step 60; the same job with a node crash mid-training (SIGKILL of the
# node's slurmd and every process of its job steps) is requeued by Slurm, resumes from the
# newest complete checkpoint, and ends bit-identical to the uninterrupted job (`ckptctl
# diff` exits 0) with the same loss at every step. Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="train_node_failure_test"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="${FTRAIN_BIN_DIR:-${REPO}/build/bin}"
IDLE_TIMEOUT_S=90
JOB_TIMEOUT_S=300
FAIL_AT_STEP=22          # crash a node once metrics.jsonl has this many steps
STEPS=60
TRAIN_ARGS="--train.steps=${STEPS} --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=hybrid_shard"

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

JOB_ID=""
FAILED_NODE=""
WORK_DIR=""
PASSED=0
cleanup() {
  local rc=$?
  cancel_job "${JOB_ID}"
  if [[ -n "${FAILED_NODE}" ]]; then
    "${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}" || log "cleanup: revive-node failed"
  fi
  if ((PASSED)); then rm -rf "${WORK_DIR}"; elif [[ -n "${WORK_DIR}" ]]; then
    log "kept work dir for inspection: ${WORK_DIR}"
  fi
  exit "${rc}"
}
trap cleanup EXIT

[[ -x "${BIN_DIR}/ftrain" ]] || fail "no ftrain binary in ${BIN_DIR}; build first"
cluster_require
wait_for_nodes_idle "${IDLE_TIMEOUT_S}"
WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-e2e.XXXXXX")"

log "packing a corpus from /usr/share/common-licenses"
"${BIN_DIR}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK_DIR}/data" /usr/share/common-licenses >/dev/null

export FTRAIN_HOME="${REPO}" FTRAIN_BIN="${BIN_DIR}/ftrain" CKPTCTL_BIN="${BIN_DIR}/ckptctl"
export FTRAIN_CONFIG="${REPO}/configs/tiny.cfg" FTRAIN_DATA="${WORK_DIR}/data"
export FTRAIN_ARGS="${TRAIN_ARGS}" FTRAIN_RANKS_PER_NODE=2

submit() {  # submit NAME -> job id
  FTRAIN_RUN_DIR="${WORK_DIR}/$1" sbatch --parsable --job-name="ftrain-$1" --nodes=2 \
    --ntasks-per-node=2 --output="${WORK_DIR}/$1-%j.out" --time=10 --export=ALL \
    --chdir="${WORK_DIR}" "${REPO}/slurm/train.sh"
}

wait_done() {  # wait_done JOBID NAME
  wait_for_job_state "$1" "COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY" "${JOB_TIMEOUT_S}"
  local state
  state="$(job_state "$1")"
  [[ "${state}" == "COMPLETED" ]] || { cat "${WORK_DIR}/$2"-*.out >&2; fail "job $1 ($2) ended ${state}"; }
}

log "reference job (uninterrupted)"
JOB_ID="$(submit ref)"
wait_done "${JOB_ID}" ref
JOB_ID=""

log "job with a node failure at step ~${FAIL_AT_STEP}"
JOB_ID="$(submit fail)"
wait_for_file_lines "${WORK_DIR}/fail/metrics.jsonl" "${FAIL_AT_STEP}" "${JOB_TIMEOUT_S}"
batch_host="$(job_field "${JOB_ID}" BatchHost)"
for n in $(job_nodes "${JOB_ID}"); do
  [[ "${n}" != "${batch_host}" ]] && FAILED_NODE="${n}" && break
done
[[ -n "${FAILED_NODE}" ]] || fail "could not pick a node to fail (batch host ${batch_host})"
t_fail="$(now_s)"
log "fail-node ${FAILED_NODE} (batch host ${batch_host} stays up)"
"${LOCAL_CLUSTER}" fail-node "${FAILED_NODE}"
wait_for 120 "job ${JOB_ID} requeued" \
  bash -c "[[ \"\$(scontrol -o show job ${JOB_ID} | grep -o 'Restarts=[0-9]*')\" == Restarts=1 ]]"
t_requeue="$(now_s)"
"${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}"
FAILED_NODE=""
wait_done "${JOB_ID}" fail
t_done="$(now_s)"
log "node failure -> requeue $(elapsed_s "${t_fail}" "${t_requeue}") s; -> finished $(elapsed_s "${t_fail}" "${t_done}") s"

grep -q '"event":"requeued","cause":"node_failure"' "${WORK_DIR}/fail/restarts.jsonl" ||
  fail "no requeue record in ${WORK_DIR}/fail/restarts.jsonl: $(cat "${WORK_DIR}/fail/restarts.jsonl")"
grep -q 'restart count 1' "${WORK_DIR}"/fail-*.out || fail "the requeued start did not log SLURM_RESTART_COUNT=1"
"${BIN_DIR}/ckptctl" diff "${WORK_DIR}/ref/checkpoints/step-000000${STEPS}" \
  "${WORK_DIR}/fail/checkpoints/step-000000${STEPS}" || fail "final checkpoints differ"
# Every step's loss, exactly as written, equals the reference.
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
diff <(losses "${WORK_DIR}/ref/metrics.jsonl") <(losses "${WORK_DIR}/fail/metrics.jsonl") ||
  fail "per-step losses differ from the uninterrupted job"
[[ "$(wc -l <"${WORK_DIR}/fail/metrics.jsonl")" == "${STEPS}" ]] || fail "metrics.jsonl is not one line per step"
"${BIN_DIR}/ckptctl" verify "${WORK_DIR}/fail/checkpoints" --all >/dev/null || fail "a checkpoint does not verify"
log "PASS: requeued after a node failure and finished bit-identical to the reference"
PASSED=1
