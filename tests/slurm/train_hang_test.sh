#!/usr/bin/env bash
# train_hang_test.sh - a hung rank on the local Slurm cluster: FTRAIN_FAULT=stall makes rank 3
# stop progressing at the start of a step while the others wait for it in a collective. With
# guard.hang_floor_s = 3 the hang guard names it (rank, node, host) in RUN/hangs.jsonl within
# 3 x its threshold and every rank exits 78, long before the 600 s collective timeout;
# train.sh restarts the training step inside the allocation (the stall fired once per run and
# does not fire again) and the run ends bit-identical to the uninterrupted reference.
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_hang_test"
STALL_AT_STEP=23
STALL_RANK=3

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
export FTRAIN_RESTART_BACKOFF_S=1

t_submit="$(now_s)"
JOB_ID="$(FTRAIN_FAULT="stall@${STALL_AT_STEP}:${STALL_RANK}" \
  FTRAIN_ARGS="${E2E_TRAIN_ARGS} --guard.hang_floor_s=3" e2e_submit hang)"
e2e_wait_done "${JOB_ID}" hang
nodes="$(scontrol show hostnames "$(job_field "${JOB_ID}" NodeList)")"
log "job nodes: $(tr '\n' ' ' <<<"${nodes}")"
log "job done in $(elapsed_s "${t_submit}" "$(now_s)") s"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued"
run="${WORK_DIR}/hang"
[[ -f "${run}/hangs.jsonl" ]] || fail "no RUN/hangs.jsonl; job output: $(tail -n 30 "${WORK_DIR}"/hang-*.out)"
[[ "$(wc -l <"${run}/hangs.jsonl")" == 1 ]] || fail "expected one hang record: $(cat "${run}/hangs.jsonl")"
# Ranks are placed 2 per node in node order: rank 3 is the second node's second rank.
want_host="$(sed -n 2p <<<"${nodes}")"
STEP="${STALL_AT_STEP}" RANK_="${STALL_RANK}" HOST="${want_host}" python3 -c '
import json, os, sys
h = json.loads(open(sys.argv[1]).readline())
ok = (h["rank"] == int(os.environ["RANK_"]) and h["node"] == 1 and h["host"] == os.environ["HOST"]
      and h["step"] == int(os.environ["STEP"]) and h["phase"] == "compute"
      and h["threshold_s"] <= h["stuck_s"] <= 3 * h["threshold_s"])
print("hang record:", h)
sys.exit(0 if ok else 1)' "${run}/hangs.jsonl" || fail "the hang record names the wrong rank or took too long"
grep -q "rank ${STALL_RANK} (node 1, host ${want_host}) hung in compute of step ${STALL_AT_STEP}" \
  "${WORK_DIR}"/hang-*.out || fail "no rank logged the hung rank with its host"
grep -q '"event":"restarted","cause":"rank_failure"' "${run}/restarts.jsonl" ||
  fail "no in-job restart record: $(cat "${run}/restarts.jsonl")"
# From the moment the rank stopped to the restart's record: the guard's share is the threshold
# and its confirmation, the rest is srun's teardown and train.sh's node check and backoff.
python3 -c '
import json, sys
h = json.loads(open(sys.argv[1]).readline())
r = [json.loads(l) for l in open(sys.argv[2]) if "\"restarted\"" in l][0]
stopped = h["time"] - h["stuck_s"]
print("measured: threshold %.1f s, named after %.1f s, restart recorded %.1f s after the rank stopped"
      % (h["threshold_s"], h["stuck_s"], r["time"] - stopped))' "${run}/hangs.jsonl" "${run}/restarts.jsonl"
grep -q "FTRAIN_FAULT: stalling" "${WORK_DIR}"/hang-*.out || fail "the stall never fired"
[[ "$(grep -c "FTRAIN_FAULT: stalling" "${WORK_DIR}"/hang-*.out)" == 1 ]] ||
  fail "the stall fired again after the restart"
e2e_expect_identical hang
log "PASS: hung rank named with its host -> exit 78 -> in-allocation restart -> bit-identical"
PASSED=1
