#!/usr/bin/env bash
# train_preempt_test.sh - preemption / time limit on the local Slurm cluster: the batch shell
# of `sbatch slurm/train.sh` gets SIGUSR1 (what --signal=B:USR1@lead delivers), forwards it to
# every rank, the ranks checkpoint at the next step boundary and exit 75, the script requeues
# the job itself, and the next run resumes and ends bit-identical to an uninterrupted job.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="train_preempt_test"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="${FTRAIN_BIN_DIR:-${REPO}/build/bin}"
IDLE_TIMEOUT_S=90
JOB_TIMEOUT_S=300
SIGNAL_AT_STEP=18
STEPS=60
TRAIN_ARGS="--train.steps=${STEPS} --ckpt.every_steps=50 --ckpt.every_minutes=0 --dist.sharding=hybrid_shard"

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

JOB_ID=""
WORK_DIR=""
PASSED=0
cleanup() {
  local rc=$?
  cancel_job "${JOB_ID}"
  if ((PASSED)); then rm -rf "${WORK_DIR}"; elif [[ -n "${WORK_DIR}" ]]; then
    log "kept work dir for inspection: ${WORK_DIR}"
  fi
  exit "${rc}"
}
trap cleanup EXIT

[[ -x "${BIN_DIR}/ftrain" ]] || fail "no ftrain binary in ${BIN_DIR}; build first"
cluster_require
wait_for_nodes_idle "${IDLE_TIMEOUT_S}"
WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-preempt.XXXXXX")"
"${BIN_DIR}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
  --progress none --out "${WORK_DIR}/data" /usr/share/common-licenses >/dev/null

export FTRAIN_HOME="${REPO}" FTRAIN_BIN="${BIN_DIR}/ftrain" CKPTCTL_BIN="${BIN_DIR}/ckptctl"
export FTRAIN_CONFIG="${REPO}/configs/tiny.cfg" FTRAIN_DATA="${WORK_DIR}/data"
export FTRAIN_ARGS="${TRAIN_ARGS}" FTRAIN_RANKS_PER_NODE=2 FTRAIN_PREFLIGHT=0

submit() {  # submit NAME -> job id
  FTRAIN_RUN_DIR="${WORK_DIR}/$1" sbatch --parsable --job-name="ftrain-$1" --nodes=2 \
    --ntasks-per-node=2 --output="${WORK_DIR}/$1-%j.out" --time=10 --export=ALL \
    --chdir="${WORK_DIR}" "${REPO}/slurm/train.sh"
}
wait_done() {  # wait_done JOBID NAME
  wait_for_job_state "$1" "COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY" "${JOB_TIMEOUT_S}"
  [[ "$(job_state "$1")" == "COMPLETED" ]] || { cat "${WORK_DIR}/$2"-*.out >&2; fail "job $1 ($2) ended $(job_state "$1")"; }
}

log "reference job"
JOB_ID="$(submit ref)"
wait_done "${JOB_ID}" ref

log "preempted job: SIGUSR1 to the batch shell at step ~${SIGNAL_AT_STEP}"
JOB_ID="$(submit pre)"
wait_for_file_lines "${WORK_DIR}/pre/metrics.jsonl" "${SIGNAL_AT_STEP}" "${JOB_TIMEOUT_S}"
scancel --signal=USR1 --batch "${JOB_ID}"
wait_for 120 "job ${JOB_ID} requeued by its script" \
  bash -c "[[ \"\$(scontrol -o show job ${JOB_ID} | grep -o 'Restarts=[0-9]*')\" == Restarts=1 ]]"
wait_done "${JOB_ID}" pre

grep -q '"event":"stopped","cause":"preempted"' "${WORK_DIR}/pre/restarts.jsonl" ||
  fail "no preemption record: $(cat "${WORK_DIR}/pre/restarts.jsonl")"
grep -q 'exiting with 75' "${WORK_DIR}"/pre-*.out || fail "ranks did not checkpoint and exit 75"
"${BIN_DIR}/ckptctl" diff "${WORK_DIR}/ref/checkpoints/step-000000${STEPS}" \
  "${WORK_DIR}/pre/checkpoints/step-000000${STEPS}" || fail "final checkpoints differ"
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
diff <(losses "${WORK_DIR}/ref/metrics.jsonl") <(losses "${WORK_DIR}/pre/metrics.jsonl") ||
  fail "per-step losses differ from the uninterrupted job"
log "PASS: USR1 -> checkpoint -> exit 75 -> scontrol requeue -> resumed bit-identically"
PASSED=1
