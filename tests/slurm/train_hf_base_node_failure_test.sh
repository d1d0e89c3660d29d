#!/usr/bin/env bash
# train_hf_base_node_failure_test.sh - fine-tuning from a Hugging Face model directory survives
# a node failure without the base: `sbatch slurm/train.sh` (2 nodes x 2 ranks, hybrid
# sharding) trains the tiny model from a sharded fp32 directory saved by transformers
# (train.init=DIR; each rank reads only its own shards' bytes). Once the first checkpoint is
# committed the test moves the base directory away for good and kills a node; the requeued
# job resumes from its checkpoint without ever reading the base again (a start that tried
# would fail the job with exit 2) and ends bit-identical to the uninterrupted job trained from
# the same base, with the same loss at every step.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_hf_base_node_failure_test"
FAIL_AT_STEP=22  # crash a node once metrics.jsonl has this many steps
HF_PYTHONPATH="${FTRAIN_HF_PYTHONPATH:-/opt/ftrain/py-transformers-5.17.0:/opt/ftrain/torch-2.11.0}"

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

# The base, made by transformers (seeded), kept under a name that is the hash of its bytes: the
# cached reference job (keyed by the training arguments, which name it) always trained from
# exactly these bytes.
made="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-hf-base.XXXXXX")"
PYTHONPATH="${HF_PYTHONPATH}" /usr/bin/python3 "${SLURM_TEST_REPO_ROOT}/tests/hf_interop.py" \
  make-base "${made}/m" --dtype float32 --shard-kb 100 >"${made}/log" 2>&1 ||
  { cat "${made}/log" >&2; rm -rf "${made}"; skip "transformers (${HF_PYTHONPATH}) cannot make the base model"; }
BASE="${TMPDIR:-/tmp}/ftrain-hf-base-$(cat "${made}"/m/* | md5sum | cut -c1-12)"
[[ -d "${BASE}" ]] || mv "${made}/m" "${BASE}"
rm -rf "${made}"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=hybrid_shard --train.init=${BASE}"

# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
MOVED="${WORK_DIR}/base-moved-away"
hf_cleanup() {
  local rc=$?
  rm -rf "${MOVED}"
  (exit "${rc}")
  e2e_cleanup
}
trap hf_cleanup EXIT

log "job fine-tuning from ${BASE}, node failure at step ~${FAIL_AT_STEP}"
JOB_ID="$(e2e_submit hf)"
committed() { "${E2E_BIN}/ckptctl" latest "${WORK_DIR}/hf/checkpoints" >/dev/null 2>&1; }
wait_for "${E2E_JOB_TIMEOUT_S}" "the first committed checkpoint of ${WORK_DIR}/hf" committed
mv "${BASE}" "${MOVED}"
log "first checkpoint committed ($("${E2E_BIN}/ckptctl" latest "${WORK_DIR}/hf/checkpoints")): moved ${BASE} away"
first_start="$(cat "${WORK_DIR}"/hf-*.out)"
# hybrid_shard: the 2 ranks of each node split the base between them, each reading only its half.
reads="$(grep -o 'train\.init: rank [0-9]* read [0-9]* of [0-9]* bytes' <<<"${first_start}" || true)"
[[ "$(wc -l <<<"${reads}")" == 4 ]] || fail "expected 4 ranks to report their base reads: ${reads}"
awk '{ if ($5 <= 0 || $5 > 0.6 * $7) bad = 1; sum += $5; total = $7 }
     END { exit (bad || sum != 2 * total) }' <<<"${reads}" ||
  fail "the ranks did not each read only their own shards of the base: ${reads}"

wait_for_file_lines "${WORK_DIR}/hf/metrics.jsonl" "${FAIL_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
node="$(e2e_non_batch_node "${JOB_ID}")" || fail "could not pick a node to fail"
e2e_freeze_ranks hf  # the failure lands before the next step however fast the run is
log "fail-node ${node} (the batch host stays up)"
e2e_fail_node "${node}"
e2e_thaw_ranks hf
wait_for_restarts "${JOB_ID}" 1 120
e2e_revive_node
e2e_wait_done "${JOB_ID}" hf

restarted="$(sed -n '/restart count 1/,$p' "${WORK_DIR}"/hf-*.out)"
[[ -n "${restarted}" ]] || fail "the requeued start did not log SLURM_RESTART_COUNT=1"
grep -q 'resume: restored step' <<<"${restarted}" || fail "the requeued start did not resume"
if grep 'train\.init' <<<"${restarted}"; then
  fail "the requeued start touched the base weights (above)"
fi
[[ ! -e "${BASE}" ]] || fail "${BASE} came back"
e2e_expect_restore_from_disk hf "${node}"
e2e_expect_identical hf
log "PASS: resumed without the base directory and finished bit-identical to the reference"
PASSED=1
