#!/usr/bin/env bash
# train_sdc_quarantine_test.sh - a node the replica check names is quarantined: recorded,
# given no ranks again, the run still bit-identical. hybrid_shard over 2 training nodes x 2
# ranks, the check every 3 steps, FTRAIN_FAULT=bitflip@7:3 flips a bit of rank 3's fp32
# master shard (once per run: RUN/.faults_fired); the check after step 9 finds the two
# replicas of shard 1 apart and every rank exits 77. Two replicas cannot be told apart, so
# both training nodes are named in RUN/quarantine.jsonl and both are quarantined
# (docs/operations.md, "Quarantined nodes"):
# - default: `sbatch --nodes=4 --no-kill` with FTRAIN_SPARE_NODES=2: the two spares take
#   their ranks inside the allocation (no requeue), the quarantined nodes stay in the job
#   unused;
# - FTRAIN_TEST_NO_SPARE=1: a 2-node job; `ftrain job` requeues it excluding both nodes
#   (ExcNodeList), and it trains on the cluster's two other nodes;
# - FTRAIN_TEST_SDC_ONE_SPARE=1: `sbatch --nodes=3 --no-kill` with one spare: one spare for two
#   quarantined nodes, and the 4-node cluster has only 2 others: `ftrain job` requeues the job
#   on 2 nodes (NumNodes lowered with ExcNodeList), both training, no spare;
# - FTRAIN_TEST_SDC_MAJORITY=1: no_shard (4 replicas of everything): only rank 3 is outvoted,
#   so only its node is quarantined; `sbatch --nodes=3 --no-kill` with one spare, which takes
#   its ranks.
# Either way: the job ends COMPLETED, the steps after the restart ran on other nodes, `ftrain
# report` says what the job did, and the final checkpoint equals the clean reference's (the
# check only reads: a clean run's bits are the same with it on or off).
# Needs a cluster of 4 nodes (FTRAIN_TEST_NODES=4, scripts/test.sh's default).
# Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_sdc_quarantine_test"
NO_SPARE="${FTRAIN_TEST_NO_SPARE:-0}"
MAJORITY="${FTRAIN_TEST_SDC_MAJORITY:-0}"
ONE_SPARE="${FTRAIN_TEST_SDC_ONE_SPARE:-0}"
((NO_SPARE)) && SLURM_TEST_NAME="train_sdc_quarantine_no_spare_test"
((ONE_SPARE)) && SLURM_TEST_NAME="train_sdc_quarantine_one_spare_test"
if ((MAJORITY)); then
  SLURM_TEST_NAME="train_sdc_quarantine_majority_test"
  E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=no_shard"
fi
FLIP_STEP=7
FLIP_RANK=3
CHECK_EVERY=3   # the check after step 9 sees the flip; the checkpoint of step 5 is clean
DETECT_STEP=9

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 4)) || skip "needs a cluster of 4 nodes (FTRAIN_TEST_NODES=4), have ${#nodes[@]}"

# The reference (e2e_setup) ran without the check and without the fault.
export FTRAIN_ARGS="${E2E_TRAIN_ARGS} --guard.sdc_every_steps=${CHECK_EVERY}"
export FTRAIN_FAULT="bitflip@${FLIP_STEP}:${FLIP_RANK}" FTRAIN_RESTART_BACKOFF_S=1
RUN="${WORK_DIR}/sdc"
if ((NO_SPARE)); then
  log "bitflip at step ${FLIP_STEP} on rank ${FLIP_RANK}, no spare: expect a requeue excluding both nodes"
  JOB_ID="$(e2e_submit sdc)"  # (not --nodelist: the requeue could never leave those nodes)
elif ((ONE_SPARE)); then
  export FTRAIN_SPARE_NODES=1
  log "bitflip at step ${FLIP_STEP} on rank ${FLIP_RANK}, one spare ${nodes[2]}: expect a requeue on 2 nodes"
  JOB_ID="$(e2e_submit sdc --nodes=3 --no-kill)"
elif ((MAJORITY)); then
  export FTRAIN_SPARE_NODES=1
  log "no_shard: bitflip at step ${FLIP_STEP} on rank ${FLIP_RANK} (${nodes[1]}), spare ${nodes[2]}"
  JOB_ID="$(e2e_submit sdc --nodes=3 --no-kill)"
else
  export FTRAIN_SPARE_NODES=2
  log "bitflip at step ${FLIP_STEP} on rank ${FLIP_RANK}, spares ${nodes[2]} ${nodes[3]}"
  JOB_ID="$(e2e_submit sdc --nodes=4 --no-kill)"
fi
e2e_wait_done "${JOB_ID}" sdc

# The check named both replicas of rank 3's shard: ranks 1 and 3, one on each training node
# (the spare job's are nodes[0] and nodes[1]; the 2-node job's are whichever Slurm gave it).
quarantine="$(cat "${RUN}/quarantine.jsonl")"
mapfile -t named < <(grep -o '"host":"[^"]*"' <<<"${quarantine}" | cut -d'"' -f4 | sort -u)
if ((MAJORITY)); then
  [[ "${named[*]}" == "${nodes[1]}" ]] || fail "expected only ${nodes[1]} (rank 3) quarantined: ${quarantine}"
  grep -q '"by_majority":true' <<<"${quarantine}" || fail "not by majority: ${quarantine}"
else
  ((${#named[@]} == 2)) || fail "expected the two training nodes in quarantine.jsonl: ${quarantine}"
  ((NO_SPARE)) || [[ "${named[*]}" == "${nodes[0]} ${nodes[1]}" ]] ||
    fail "quarantine.jsonl names ${named[*]}, not the training nodes ${nodes[0]} ${nodes[1]}"
fi
grep -q "\"rank\":${FLIP_RANK},.*\"step\":${DETECT_STEP}" <<<"${quarantine}" ||
  fail "rank ${FLIP_RANK} is not named at step ${DETECT_STEP}: ${quarantine}"
records="$(cat "${RUN}/restarts.jsonl")"
grep -q '"event":"sdc"' <<<"${records}" || fail "no sdc record: ${records}"
out="$(cat "${WORK_DIR}"/sdc-*.out)"
# Every launch after the quarantine: only on the other two nodes.
after="$(sed -n '/quarantined (RUN\/quarantine.jsonl; step exit/,$p' <<<"${out}" | grep 'launching .* train on ' || true)"
[[ -n "${after}" ]] || fail "no launch after the quarantine: $(grep -E 'quarantin|launching' <<<"${out}")"
for n in "${named[@]}"; do
  ! grep -q " ${n}\( \|$\)" <<<"${after}" || fail "${n} got ranks after its quarantine: ${after}"
done
report="$("${E2E_BIN}/ftrain" report "${RUN}")" || fail "ftrain report failed"
if ((ONE_SPARE)); then
  [[ "$(e2e_restarts "${JOB_ID}")" == 1 ]] || fail "expected one requeue, Slurm says $(e2e_restarts "${JOB_ID}")"
  grep -q "requeued without its spare(s): node(s) ${nodes[0]} ${nodes[1]} quarantined" <<<"${out}" ||
    fail "no 'requeued without its spare' log: $(grep -E 'quarantin|requeue' <<<"${out}")"
  grep -q '"event":"step_failed","cause":"quarantine".*"action":"requeue_fewer_spares","num_nodes":2,"spares":0' <<<"${records}" ||
    fail "no step_failed/quarantine requeue_fewer_spares record: ${records}"
  grep -q '"event":"requeued","cause":"quarantine"' <<<"${records}" || fail "no requeued/quarantine record"
  # The requeued job ran on the cluster's two other nodes, both training (4 ranks), no spare.
  ran="$(scontrol show hostnames "$(job_field "${JOB_ID}" NodeList)" | paste -sd' ')"
  [[ "${ran}" == "${nodes[2]} ${nodes[3]}" ]] || fail "the requeued job ran on ${ran}, not ${nodes[2]} ${nodes[3]}"
  [[ "${after}" == *"4 ranks: ${nodes[2]} ${nodes[2]} ${nodes[3]} ${nodes[3]}"* ]] ||
    fail "the requeued job did not train 4 ranks on ${nodes[2]} ${nodes[3]}: ${after}"
  grep -q "2 training node(s), 0 spare(s)" <<<"${out}" || fail "the requeued start did not keep 2 training nodes"
  exc="$(scontrol show hostnames "$(job_field "${JOB_ID}" ExcNodeList)" | paste -sd' ')"
  for n in "${named[@]}"; do
    [[ " ${exc} " == *" ${n} "* ]] || fail "ExcNodeList ${exc} lacks ${n}"
  done
  grep -q "excluded from the requeued job.*fewer spares" <<<"${report}" || fail "ftrain report: ${report}"
elif ((NO_SPARE)); then
  [[ "$(e2e_restarts "${JOB_ID}")" == 1 ]] || fail "expected one requeue, Slurm says $(e2e_restarts "${JOB_ID}")"
  grep -q '"event":"step_failed","cause":"quarantine"' <<<"${records}" ||
    fail "no step_failed/quarantine record: ${records}"
  grep -q '"event":"requeued","cause":"quarantine"' <<<"${records}" || fail "no requeued/quarantine record"
  # The requeued start ran on the cluster's other two nodes.
  ran="$(scontrol show hostnames "$(job_field "${JOB_ID}" NodeList)" | paste -sd' ')"
  for n in "${named[@]}"; do
    [[ " ${ran} " != *" ${n} "* ]] || fail "the requeued job ran on ${ran}, with quarantined ${n}"
  done
  [[ "$(job_field "${JOB_ID}" ExcNodeList)" == *"${named[0]}"* ]] ||
    fail "ExcNodeList is $(job_field "${JOB_ID}" ExcNodeList)"
  grep -q "excluded from the requeued job" <<<"${report}" || fail "ftrain report: ${report}"
else
  [[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued ($(e2e_restarts "${JOB_ID}") restarts)"
  if ((MAJORITY)); then
    [[ "${after}" == *"4 ranks: ${nodes[0]} ${nodes[0]} ${nodes[2]} ${nodes[2]}"* ]] ||
      fail "the spare did not take ranks 2,3 (the others keep theirs): ${after}"
  else
    [[ "${after}" == *"4 ranks: ${nodes[2]} ${nodes[2]} ${nodes[3]} ${nodes[3]}"* ]] ||
      fail "the spares did not take ranks 0-3: ${after}"
  fi
  for n in "${named[@]}"; do
    grep -q "\"event\":\"restarted\",\"cause\":\"quarantine\",\"node\":\"${n}\"" <<<"${records}" ||
      fail "no replacement record for ${n}: ${records}"
  done
  grep -q "replaced by spare ${nodes[2]}" <<<"${report}" || fail "ftrain report: ${report}"
  ! grep -qw "${named[0]}" "${RUN}/.job-nodes" 2>/dev/null ||
    fail "the replication ring still holds ${named[0]}: $(cat "${RUN}/.job-nodes")"
fi
e2e_expect_identical sdc
log "PASS: bitflip on rank ${FLIP_RANK} -> ${named[*]} quarantined and $( ((NO_SPARE || ONE_SPARE)) && echo "excluded on requeue" || echo "replaced by spares"); bit-identical"
PASSED=1
