#!/usr/bin/env bash
# e2e.sh - the end-to-end Slurm tests' common part (source it after lib.sh): a packed corpus,
# `sbatch slurm/train.sh` jobs (2 nodes x 2 ranks, tiny model, hybrid sharding, checkpoints
# every 5 steps, one ckptd per node through slurm/agent.sh), the uninterrupted reference job,
# and the bit-identity checks. The corpus and the reference are built once per build of
# ftrain and shared by the tests (E2E_CACHE, keyed by the binary and the settings), so each
# test pays only for its own interrupted job.
# The caller sets SLURM_TEST_NAME and may set E2E_STEPS / E2E_TRAIN_ARGS before sourcing.

E2E_REPO="${SLURM_TEST_REPO_ROOT}"
E2E_BIN="${FTRAIN_BIN_DIR:-${E2E_REPO}/build/bin}"
E2E_STEPS="${E2E_STEPS:-60}"
E2E_TRAIN_ARGS="${E2E_TRAIN_ARGS:---train.steps=${E2E_STEPS} --ckpt.every_steps=5 --ckpt.every_minutes=0 --dist.sharding=hybrid_shard}"
E2E_IDLE_TIMEOUT_S=90
E2E_JOB_TIMEOUT_S=300

JOB_ID=""
FAILED_NODE=""
PAUSED_NODE=""  # e2e_pause_node: resumed at exit
E2E_BG_PIDS=()  # a test's background helpers: killed at exit
E2E_RESTORE_TIMEOUTS=""  # "SLURMD MSG" to put back at the end (e2e_use_timeouts)
WORK_DIR=""
PASSED=0
e2e_cleanup() {
  local rc=$? run log node
  ((${#E2E_BG_PIDS[@]} == 0)) || kill "${E2E_BG_PIDS[@]}" 2>/dev/null || true
  [[ -z "${PAUSED_NODE}" ]] || "${LOCAL_CLUSTER}" resume-node "${PAUSED_NODE}" >/dev/null ||
    log "cleanup: resume-node ${PAUSED_NODE} failed"
  cancel_job "${JOB_ID}"
  if [[ -n "${FAILED_NODE}" ]]; then
    "${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}" || log "cleanup: revive-node failed"
  fi
  if [[ -n "${E2E_RESTORE_TIMEOUTS}" ]]; then
    # shellcheck disable=SC2086  # two numbers
    "${LOCAL_CLUSTER}" timeouts ${E2E_RESTORE_TIMEOUTS} >/dev/null || log "cleanup: could not restore the cluster's timeouts (${E2E_RESTORE_TIMEOUTS})"
  fi
  # A daemon SIGKILLed by the cancel leaves its slots in its node's private /dev/shm, where
  # they would stay until the node dies: unlink them from inside each node that is up (a
  # failed node's memory is gone already; node-exec then fails, which is fine).
  for log in "${WORK_DIR:-/nonexistent}"/*/logs/ckptd-*.log; do
    [[ -e "${log}" ]] || continue
    run="$(dirname "$(dirname "${log}")")"
    node="$(basename "${log}" .log)"
    node="${node#ckptd-}"
    "${LOCAL_CLUSTER}" node-exec "${node}" "${E2E_BIN}/ckptd" --cleanup \
      --root "${run}/checkpoints" --run-dir "${run}" --node "${node}" >/dev/null 2>&1 || true
  done
  if ((PASSED)) && [[ -z "${FTRAIN_TEST_KEEP:-}" ]]; then rm -rf "${WORK_DIR}"; elif [[ -n "${WORK_DIR}" ]]; then
    log "kept work dir for inspection: ${WORK_DIR}"
  fi
  exit "${rc}"
}

# Checks the build and the cluster, makes WORK_DIR, exports train.sh's settings, and makes
# sure the cached corpus and reference exist (E2E_DATA, E2E_REF; the reference runs on
# E2E_REF_NODES nodes, 2 unless the test says).
e2e_setup() {
  trap e2e_cleanup EXIT
  [[ -x "${E2E_BIN}/ftrain" ]] || fail "no ftrain binary in ${E2E_BIN}; build first"
  cluster_require
  wait_for_nodes_idle "${E2E_IDLE_TIMEOUT_S}"
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-${SLURM_TEST_NAME}.XXXXXX")"
  local key
  key="$( (stat -c '%s %Y' "${E2E_BIN}/ftrain" "${E2E_BIN}/ckptd"; echo "${E2E_TRAIN_ARGS}"
    echo "${E2E_REF_NODES:-2}") |
    md5sum | cut -c1-12)"
  # One cache root per build directory: a build's stale keys are removed below, and two
  # checkouts testing at once (a clone in CI beside a working tree) must not remove each
  # other's corpus and reference under a running test.
  local root
  root="$(realpath "${E2E_BIN}" | md5sum | cut -c1-8)"
  E2E_CACHE="${FTRAIN_E2E_CACHE:-${TMPDIR:-/tmp}/ftrain-e2e-cache}/${root}/${key}"
  E2E_DATA="${E2E_CACHE}/data"
  E2E_REF="${E2E_CACHE}/ref"
  export FTRAIN_HOME="${E2E_REPO}" FTRAIN_BIN="${E2E_BIN}/ftrain" CKPTCTL_BIN="${E2E_BIN}/ckptctl"
  export CKPTD_BIN="${E2E_BIN}/ckptd"
  export FTRAIN_CONFIG="${E2E_REPO}/configs/tiny.cfg" FTRAIN_DATA="${E2E_DATA}"
  export FTRAIN_ARGS="${E2E_TRAIN_ARGS}" FTRAIN_RANKS_PER_NODE=2 FTRAIN_PREFLIGHT=0
  if [[ ! -f "${E2E_CACHE}/ref.done" ]]; then
    # Keys of this build directory's earlier binaries are stale; this build's other settings (a test with its own
    # E2E_TRAIN_ARGS) stay, so that tests of both kinds can alternate without recomputing.
    local stamp old
    stamp="$(stat -c '%s %Y' "${E2E_BIN}/ftrain" "${E2E_BIN}/ckptd" | md5sum | cut -c1-12)"
    for old in "$(dirname "${E2E_CACHE}")"/*/; do
      [[ -d "${old}" && "$(cat "${old}/build" 2>/dev/null)" != "${stamp}" ]] && rm -rf "${old}"
    done
    mkdir -p "${E2E_CACHE}"
    echo "${stamp}" >"${E2E_CACHE}/build"
    log "packing a corpus from /usr/share/common-licenses (cached in ${E2E_CACHE})"
    "${E2E_BIN}/ftrain" pack --train-tokenizer --vocab-size 512 --seq-len 32 --shard-rows 256 \
      --progress none --out "${E2E_DATA}" /usr/share/common-licenses >/dev/null
    log "reference job (uninterrupted), cached for the other tests of this build"
    JOB_ID="$(FTRAIN_RUN_DIR="${E2E_REF}" e2e_submit_to "${E2E_CACHE}" ref --nodes="${E2E_REF_NODES:-2}")"
    E2E_OUT_DIR="${E2E_CACHE}" e2e_wait_done "${JOB_ID}" ref
    JOB_ID=""
    touch "${E2E_CACHE}/ref.done"
  else
    log "reusing the cached reference ${E2E_REF}"
  fi
}

# Runs the test under other Slurm timeouts (e.g. Slurm's defaults, 300 10), put back at exit.
e2e_use_timeouts() {  # e2e_use_timeouts SLURMD_TIMEOUT MESSAGE_TIMEOUT
  local old
  old="$("${LOCAL_CLUSTER}" timeouts "$1" "$2")" || fail "could not set the cluster's timeouts to $1 $2"
  [[ -n "${E2E_RESTORE_TIMEOUTS}" ]] || E2E_RESTORE_TIMEOUTS="${old}"
  log "cluster timeouts: SlurmdTimeout=$1 MessageTimeout=$2 (were ${old}; put back at exit)"
}

e2e_submit_to() {  # e2e_submit_to OUT_DIR NAME [sbatch args...] -> job id
  local out="$1" name="$2"
  shift 2
  FTRAIN_RUN_DIR="${FTRAIN_RUN_DIR:-${WORK_DIR}/${name}}" sbatch --parsable \
    --job-name="ftrain-${name}" --nodes=2 --ntasks-per-node=2 --output="${out}/${name}-%j.out" \
    --time=10 --export=ALL --chdir="${out}" "$@" "${E2E_REPO}/slurm/train.sh"
}

e2e_submit() { e2e_submit_to "${WORK_DIR}" "$@"; }  # e2e_submit NAME [sbatch args...]

e2e_wait_done() {  # e2e_wait_done JOBID NAME: fails unless the job COMPLETED
  wait_for_job_state "$1" "COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY" "${E2E_JOB_TIMEOUT_S}"
  local state
  state="$(job_state "$1")"
  [[ "${state}" == "COMPLETED" ]] ||
    { cat "${E2E_OUT_DIR:-${WORK_DIR}}/$2"-*.out >&2; fail "job $1 ($2) ended ${state}"; }
}

e2e_restarts() { job_field "$1" Restarts; }  # how often Slurm requeued the job

# Every state the job is seen in, one a line in FILE every 0.5 s, until it ends: in the
# background of the calling shell (its `wait` waits for it). The tests that must never see
# the job leave RUNNING read the file.
e2e_watch_states() {  # e2e_watch_states JOBID FILE
  local job="$1" file="$2"
  (while sleep 0.5; do
    s="$(job_state "${job}")"
    echo "${s}"
    [[ ! "${s}" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]] || break
  done) >"${file}" 2>/dev/null &
}

wait_for_restarts() {  # wait_for_restarts JOBID N TIMEOUT_S
  wait_for "$3" "job $1 requeued ($2 restarts)" bash -c "[[ \"\$(scontrol -o show job $1 | grep -o 'Restarts=[0-9]*')\" == Restarts=$2 ]]"
}

# The batch host of spare job OLD (run NAME) died: its node agents submit it again and cancel
# it. Prints the new job's id once restarts.jsonl names it.
e2e_wait_resubmitted() {  # e2e_wait_resubmitted NAME OLD TIMEOUT_S
  local f="${WORK_DIR}/$1/restarts.jsonl"
  wait_for "$3" "job $2 resubmitted by its node agents" \
    grep -q "\"job\":\"$2\",.*\"event\":\"resubmitted\"" "${f}"
  grep "\"job\":\"$2\",.*\"event\":\"resubmitted\"" "${f}" | head -n 1 |
    sed -E 's/.*"new_job":"([0-9]+)".*/\1/'
}

# The checkpoint generation the newest start of run NAME logged (its output files, in job
# id order: a resubmitted job's after the old one's).
e2e_new_generation() {  # e2e_new_generation NAME
  printf '%s\n' "${WORK_DIR}/$1"-*.out | sort -V | xargs -d '\n' grep -ho 'checkpoint generation [0-9a-f-]*' |
    tail -n 1 | cut -d' ' -f3
}

e2e_generation_of() {  # e2e_generation_of CHECKPOINT_DIR: its manifest's generation
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$1/manifest.json"
}

# Has the newest start of run NAME committed a checkpoint (the newest one is of its generation)?
e2e_new_generation_committed() {  # e2e_new_generation_committed NAME
  local latest
  latest="$("${E2E_BIN}/ckptctl" latest "${WORK_DIR}/$1/checkpoints" 2>/dev/null)" || return 1
  [[ "$(e2e_generation_of "${latest}" 2>/dev/null)" == "$(e2e_new_generation "$1")" ]]
}

# Fencing: every checkpoint of run NAME after step RESUME_STEP carries generation GEN (a node
# that woke up from a pause wrote nothing with its old generation).
e2e_expect_generation_after() {  # e2e_expect_generation_after NAME RESUME_STEP GEN
  local d step g
  for d in "${WORK_DIR}/$1"/checkpoints/step-*; do
    [[ -f "${d}/manifest.json" ]] || continue
    step=$((10#${d##*step-}))
    ((step > $2)) || continue
    g="$(e2e_generation_of "${d}")"
    [[ "${g}" == "$3" ]] || fail "checkpoint ${d} (after the relaunch at step $2) has generation ${g}, not the new start's $3"
  done
}

# The step the first resume of run NAME after its first EVENT record restored (empty: none).
e2e_resume_step_after() {  # e2e_resume_step_after NAME EVENT
  sed -n "/\"event\":\"$2\"/,\$p" "${WORK_DIR}/$1/restarts.jsonl" | grep -o '"event":"resumed".*' |
    head -n 1 | sed -E 's/.*"step":([0-9]+),.*/\1/'
}

# A node of the job other than the batch host (whose death would take the script with it).
e2e_non_batch_node() {
  local batch_host n
  batch_host="$(job_field "$1" BatchHost)"
  for n in $(job_nodes "$1"); do
    if [[ "${n}" != "${batch_host}" ]]; then echo "${n}"; return 0; fi
  done
  return 1
}

e2e_fail_node() {  # e2e_fail_node NODE: SIGKILL the node's slurmd and everything it runs
  FAILED_NODE="$1"
  "${LOCAL_CLUSTER}" fail-node "$1"
}

e2e_revive_node() {
  "${LOCAL_CLUSTER}" revive-node "${FAILED_NODE}"
  FAILED_NODE=""
}

# e2e_pause_node NODE: SIGSTOP the node's slurmd and everything it runs (a hung node; resumed
# at exit unless e2e_resume_node ran).
e2e_pause_node() {
  PAUSED_NODE="$1"
  "${LOCAL_CLUSTER}" pause-node "$1"
}

e2e_resume_node() {
  "${LOCAL_CLUSTER}" resume-node "${PAUSED_NODE}"
  PAUSED_NODE=""
}

# Pids of the `ftrain train` ranks of run NAME (all nodes share this host's pid namespace).
e2e_rank_pids() { pgrep -f "^${E2E_BIN}/ftrain train .*--run.dir=${WORK_DIR}/$1( |$)" || true; }

# After a node failure every rank of the requeued job restores from disk: the failed node's
# daemon died with the node's memory (so its successor there finds none of its slots: a
# successor that did would remove them and log "stale shared-memory slot(s)"), and the
# requeue restarts every survivor's daemon as well, so no daemon holds a snapshot any more.
# OPTIONAL=1: the failure may have come before the first complete checkpoint (no resume).
e2e_expect_restore_from_disk() {  # e2e_expect_restore_from_disk NAME FAILED_NODE [OPTIONAL]
  local run="${WORK_DIR}/$1" node="$2" optional="${3:-0}" resumed
  [[ -r "${run}/logs/ckptd-${node}.log" ]] || fail "no ckptd log of ${node} in ${run}/logs"
  if grep -q 'stale shared-memory slot' "${run}/logs/ckptd-${node}.log"; then
    fail "a ckptd on ${node} found slots of the daemon that died with the node: the node's \
memory survived its crash ($(grep 'stale shared-memory' "${run}/logs/ckptd-${node}.log"))"
  fi
  resumed="$(sed -n '/"event":"requeued"/,$p' "${run}/restarts.jsonl" | grep '"event":"resumed"')" ||
    resumed=""
  if [[ -z "${resumed}" ]]; then
    ((optional)) || fail "no resume after the requeue in ${run}/restarts.jsonl"
    log "no checkpoint was complete before the failure: the requeued job started afresh"
    return 0
  fi
  if grep -v '"source":"disk"' <<<"${resumed}"; then
    fail "a resume after the node failure did not come from disk (above)"
  fi
  log "after the node failure every rank restored from disk (${node}'s memory died with it)"
}

# SIGSTOP / SIGCONT every rank of run NAME: a node failure then lands before the next step
# however fast the tiny model trains (the ranks on the failed node die stopped).
e2e_freeze_ranks() { e2e_rank_pids "$1" | xargs -r kill -STOP; }
e2e_thaw_ranks() { e2e_rank_pids "$1" | xargs -r kill -CONT; }

# After a relaunch inside the job (a spare took a dead node's ranks): waits until COUNT ranks of
# run NAME run that are not among OLD_PIDS (the ranks before the failure) and freezes them at
# once, polling every 50 ms: recovery is fast enough now that the tiny model reaches its last
# step within the test's usual poll interval. Thaw with e2e_thaw_ranks.
e2e_freeze_relaunched() {  # e2e_freeze_relaunched NAME COUNT "OLD_PIDS" TIMEOUT_S
  local deadline=$((SECONDS + $4)) pid fresh
  while ((SECONDS < deadline)); do
    fresh=()
    for pid in $(e2e_rank_pids "$1"); do [[ " $3 " == *" ${pid} "* ]] || fresh+=("${pid}"); done
    if ((${#fresh[@]} >= $2)); then
      kill -STOP "${fresh[@]}"
      return 0
    fi
    sleep 0.05
  done
  fail "the $2 relaunched ranks of $1 did not start within $4 s"
}

# Settled: no snapshot in flight on any node of run NAME, and NODE's daemon holds replicas of
# RANKS (e.g. "2 3"; none: only the first part) of the newest committed checkpoint.
e2e_settled() {  # e2e_settled NAME NODE RANKS
  local latest
  latest="$("${E2E_BIN}/ckptctl" latest "${WORK_DIR}/$1/checkpoints" 2>/dev/null)" || return 1
  # (ckptctl fails when a node's daemon is gone, e.g. with its node: its line has no pid)
  { "${E2E_BIN}/ckptctl" status "${WORK_DIR}/$1" --json 2>/dev/null || true; } |
    STEP="${latest##*step-}" NODE="$2" RANKS="$3" python3 -c 'import json,os,sys
step=int(os.environ["STEP"]); want={int(r) for r in os.environ["RANKS"].split()}
ok=True; held=set()
for line in sys.stdin:
    j=json.loads(line)
    if not j.get("pid"): continue
    ok = ok and j["snapshots_in_flight"] == 0 and j["queue_depth"] == 0
    if j["node"] == os.environ["NODE"]:
        held = {h["rank"] for h in j["replication"]["replicas_held"] if h["step"] == step}
sys.exit(0 if ok and want <= held else 1)'
}

# Freezes the ranks of run NAME at a moment when e2e_settled NAME NODE RANKS holds (letting them
# run a second between tries, about a checkpoint interval of the tiny model); fails the test
# after 30 tries. Thaw with e2e_thaw_ranks.
e2e_freeze_settled() {  # e2e_freeze_settled NAME NODE RANKS
  local try
  for ((try = 0; ; try++)); do
    e2e_freeze_ranks "$1"
    poll_until 5 e2e_settled "$@" && return 0
    ((try < 30)) || fail "the newest checkpoint of $1 never settled with replicas of ranks $3 on $2"
    e2e_thaw_ranks "$1"
    sleep 1
  done
}

# Does NODE's daemon hold a replica of every rank in RANKS (any step) for run NAME?
e2e_holds_replicas() {  # e2e_holds_replicas NAME NODE RANKS
  { "${E2E_BIN}/ckptctl" status "${WORK_DIR}/$1" --json 2>/dev/null || true; } |
    NODE="$2" RANKS="$3" python3 -c 'import json,os,sys
want={int(r) for r in os.environ["RANKS"].split()}
for line in sys.stdin:
    j=json.loads(line)
    if j.get("pid") and j["node"] == os.environ["NODE"]:
        sys.exit(0 if want <= {h["rank"] for h in j["replication"]["replicas_held"]} else 1)
sys.exit(1)'
}

# The run's final checkpoint is bit-identical to the reference, every step's loss (as
# written) equals the reference's, metrics.jsonl has one line per step, every checkpoint
# verifies. CKPT_ROOT: where the run's checkpoints are (default RUN/checkpoints).
e2e_expect_identical() {  # e2e_expect_identical NAME [CKPT_ROOT]
  local run="${WORK_DIR}/$1" step
  local root="${2:-${run}/checkpoints}"
  step="$(printf '%08d' "${E2E_STEPS}")"
  "${E2E_BIN}/ckptctl" diff "${E2E_REF}/checkpoints/step-${step}" \
    "${root}/step-${step}" || fail "final checkpoints differ"
  losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
  diff <(losses "${E2E_REF}/metrics.jsonl") <(losses "${run}/metrics.jsonl") ||
    fail "per-step losses differ from the uninterrupted job"
  [[ "$(wc -l <"${run}/metrics.jsonl")" == "${E2E_STEPS}" ]] ||
    fail "metrics.jsonl is not one line per step"
  "${E2E_BIN}/ckptctl" verify "${root}" --all >/dev/null ||
    fail "a checkpoint of ${run} does not verify"
}
