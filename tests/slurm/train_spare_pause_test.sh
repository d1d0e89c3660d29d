#!/usr/bin/env bash
# train_spare_pause_test.sh - split brain: a training node hangs instead of dying. Under
# Slurm's default timeouts (SlurmdTimeout=300, MessageTimeout=10, set for the test and put
# back at exit) a job with a hot spare trains on 2 nodes; one of them is paused (SIGSTOP of its
# slurmd and every process of its job steps: ranks, node agent, ckptd), and later resumed.
#   - a paused node still completes TCP handshakes: ftrain must first only note the late
#     heartbeat (heartbeat_late record, nothing restarted) and declare the node lost only after
#     FTRAIN_HUNG_AFTER_S (6 s here) of silence, when a task on it does not start either
#     (verdict "hung"); its ranks then run on the spare;
#   - once the new step has committed a checkpoint the node is resumed: its old ranks and its
#     daemon wake up in the middle of the old start's work. Generation fencing must keep them
#     out: every checkpoint committed after the relaunch carries the new start's generation,
#     every checkpoint verifies, and the run ends bit-identical to the uninterrupted reference.
# Before that, a false alarm: the node's agent stops for 5 s (its heartbeat misses more than
# FTRAIN_HEARTBEAT_TIMEOUT_S = 3 s) while its slurmd answers: heartbeat_late, nothing restarted.
# Needs a cluster of >= 3 nodes. Exit 0 pass, 1 fail, 77 skip.
set -euo pipefail

SLURM_TEST_NAME="train_spare_pause_test"
E2E_TRAIN_ARGS="--train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=full_shard"
PAUSE_AT_STEP=12

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=tests/slurm/e2e.sh
source "${SLURM_TEST_LIB_DIR}/e2e.sh"
e2e_setup
mapfile -t nodes < <(cluster_nodes)
((${#nodes[@]} >= 3)) || skip "needs a cluster of 3 nodes (FTRAIN_TEST_NODES=3), have ${#nodes[@]}"
e2e_use_timeouts 300 10

# The heartbeat (and follower) of NODE's agent, not its ckptd: stopped, a stalled agent. The
# agent (`ftrain agent`) runs them as threads of its own process, so that process is stopped
# (ckptd, its child, runs on); a bash agent ran them as subshells (its bash children).
agent_subshells() {  # agent_subshells RUN NODE
  local agent p found=0
  agent="$(cut -d' ' -f2 "$1/.heartbeats/$2" 2>/dev/null)"
  [[ -n "${agent}" ]] || return 0
  for p in $(pgrep -P "${agent}" || true); do
    [[ "$(cat "/proc/${p}/comm" 2>/dev/null)" == bash ]] && echo "${p}" && found=1  # not ckptd
  done
  ((found)) || echo "${agent}"
  return 0
}

export FTRAIN_SPARE_NODES=1 FTRAIN_SPARE_NODELIST="${nodes[0]}" FTRAIN_HUNG_AFTER_S=6
JOB_ID="$(e2e_submit pause --nodes=3 --no-kill)"
run="${WORK_DIR}/pause"
wait_for_file_lines "${run}/metrics.jsonl" "${PAUSE_AT_STEP}" "${E2E_JOB_TIMEOUT_S}"
# The false alarm, the ranks frozen meanwhile (the tiny run would end during it).
e2e_freeze_ranks pause
mapfile -t stalled < <(agent_subshells "${run}" "${nodes[2]}")
((${#stalled[@]} > 0)) || fail "no heartbeat of ${nodes[2]}'s agent in ${run}/.heartbeats"
kill -STOP "${stalled[@]}"
sleep 5
kill -CONT "${stalled[@]}"
wait_for 10 "the late heartbeat's record" grep -q '"event":"heartbeat_late".*"node":"'"${nodes[2]}"'"' "${run}/restarts.jsonl"
e2e_thaw_ranks pause
sleep 1
grep -q '"event":"step_failed"\|"event":"restarted"' "${run}/restarts.jsonl" &&
  fail "a false alarm (one stalled agent, its slurmd answering) restarted something: $(cat "${run}/restarts.jsonl")"
log "false alarm: ${nodes[2]}'s heartbeat stopped 5 s, noted, nothing restarted"
e2e_pause_node "${nodes[2]}"
t_pause="$(now_s)"
wait_for 60 "the replacement record" grep -q '"event":"restarted","cause":"node_failure"' "${run}/restarts.jsonl"
t_relaunch="$(now_s)"
log "paused ${nodes[2]}; its ranks relaunched on the spare $(elapsed_s "${t_pause}" "${t_relaunch}") s later"
# The new start commits a checkpoint of its own before the old one wakes up.
wait_for 60 "a checkpoint of the new start" e2e_new_generation_committed pause
e2e_resume_node
log "resumed ${nodes[2]}: its old ranks and daemon wake up"
e2e_wait_done "${JOB_ID}" pause

rec="$(grep '"event":"restarted","cause":"node_failure"' "${run}/restarts.jsonl")"
[[ "${rec}" == *"\"node\":\"${nodes[2]}\""* && "${rec}" == *'"verdict":"hung"'* && "${rec}" == *'"slurmd":"open"'* ]] ||
  fail "the paused node was not declared hung (slurmd port open) by ftrain: ${rec}"
late="$(grep -c '"event":"heartbeat_late"' "${run}/restarts.jsonl" || true)"
((late >= 2)) || fail "the pause was not first noted as a late heartbeat (${late} heartbeat_late records)"
[[ "$(e2e_restarts "${JOB_ID}")" == 0 ]] || fail "the job was requeued"
# Fencing: after the relaunch only the new generation commits.
gen="$(e2e_new_generation pause)"
resume_step="$(e2e_resume_step_after pause restarted)"
[[ -n "${resume_step}" ]] || fail "no resumed record after the relaunch"
e2e_expect_generation_after pause "${resume_step}" "${gen}"
e2e_expect_identical pause
log "PASS: ${nodes[2]} paused, declared hung after ${FTRAIN_HUNG_AFTER_S} s, replaced; resumed, it wrote nothing into generation ${gen}; bit-identical"
PASSED=1
