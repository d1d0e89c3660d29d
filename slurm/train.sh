#!/usr/bin/env bash
#SBATCH --job-name=ftrain
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=ftrain-%j.out
# train.sh - the ftrain sbatch script: the #SBATCH header above, the documented defaults of
# every setting, and `exec ftrain job`, the job controller (src/orch: a pure transition
# function driven by what happens, docs/design.md "The job controller"). exec keeps this PID,
# so --signal=B:USR1 reaches the controller. What it does on a start, a time limit, a
# preemption, a rank crash, a dead or hung node, a dead batch host, and every Slurm 22.05 quirk
# it works around: docs/operations.md and the comments of src/orch/*.h.
#   sbatch --nodes=N --ntasks-per-node=R --export=ALL slurm/train.sh           (no spares)
#   sbatch --nodes=N+S --no-kill ... with FTRAIN_SPARE_NODES=S                  (hot spares)
# Every setting comes from the environment (sbatch --export or the caller's environment); the
# defaults below are the controller's own (tests/orch_docs_test.cc checks that they agree).
set -euo pipefail

# ---- where ftrain is -------------------------------------------------------------------------
export FTRAIN_HOME="${FTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$(pwd)}}"  # the ftrain checkout
export FTRAIN_BIN="${FTRAIN_BIN:-${FTRAIN_HOME}/build/bin/ftrain}"
# Required: FTRAIN_CONFIG (training config), FTRAIN_RUN_DIR (shared file system), FTRAIN_DATA
# (packed data directory or URL). FTRAIN_ARGS: extra --section.key=value overrides;
# FTRAIN_CKPT_ROOT: passed as --ckpt.root; FTRAIN_CKPTD_ARGS: ckptd flags.
# ---- the job ---------------------------------------------------------------------------------
export FTRAIN_RANKS_PER_NODE="${FTRAIN_RANKS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-1}}"  # one rank per GPU
export FTRAIN_PREFLIGHT="${FTRAIN_PREFLIGHT:-1}"              # 1: ftrain commcheck over all ranks before training
export FTRAIN_PREFLIGHT_TIMEOUT_S="${FTRAIN_PREFLIGHT_TIMEOUT_S:-120}"
export FTRAIN_MAX_INJOB_RESTARTS="${FTRAIN_MAX_INJOB_RESTARTS:-2}"     # rank failures on healthy nodes restarted in the job
export FTRAIN_MAX_FAILED_STARTS="${FTRAIN_MAX_FAILED_STARTS:-3}"      # such starts in a row without a newer checkpoint: FAIL
export FTRAIN_RESTART_BACKOFF_S="${FTRAIN_RESTART_BACKOFF_S:-5}"      # doubles after every in-job restart
export FTRAIN_MAX_ROLLBACK_RESTARTS="${FTRAIN_MAX_ROLLBACK_RESTARTS:-6}"  # exits 79 restarted per newest checkpoint, then a failed start
export FTRAIN_MAX_NODE_REQUEUES="${FTRAIN_MAX_NODE_REQUEUES:-5}"      # node failure/fault/quarantine requeues in a row without a newer checkpoint: FAIL
export FTRAIN_STORAGE_OUTAGE_S="${FTRAIN_STORAGE_OUTAGE_S:-1800}"     # exit 74 (checkpoint storage unreadable at resume) retried this long
export FTRAIN_HEALTH_TIMEOUT_S="${FTRAIN_HEALTH_TIMEOUT_S:-20}"      # a node that cannot run `true` in this is down
export FTRAIN_HEALTH_WAIT_S="${FTRAIN_HEALTH_WAIT_S:-300}"        # then wait this long for Slurm to requeue, else requeue
export FTRAIN_STOP_TIMEOUT_S="${FTRAIN_STOP_TIMEOUT_S:-90}"        # USR1 -> the ranks' checkpoint must end within this
# FTRAIN_USR1_LEAD_S: unset (the default), a USR1's lead is what Slurm says is left (the job's
# EndTime, the partition's GraceTime), else 120, the @120 above; set it to override them.
export FTRAIN_TERM_ASK_S="${FTRAIN_TERM_ASK_S:-10}"            # TERM and slurmctld does not answer: ask this long, then requeue
export FTRAIN_REQUEUE_RETRY_S="${FTRAIN_REQUEUE_RETRY_S:-180}"    # budget of a requeue not racing the time limit (node/rank failure)
export FTRAIN_LEASE_RETRY_S="${FTRAIN_LEASE_RETRY_S:-60}"        # the run lease cannot be renewed (I/O error): retry this long, then requeue
export FTRAIN_FAULTY_KEEP_S="${FTRAIN_FAULTY_KEEP_S:-86400}"     # a node that failed a localisation or exit 76 stays out this long (0: the run)
export FTRAIN_CKPTD="${FTRAIN_CKPTD:-1}"                  # 1: one ckptd per node, through the node agents
export FTRAIN_CKPTD_START_TIMEOUT_S="${FTRAIN_CKPTD_START_TIMEOUT_S:-60}"
export FTRAIN_CKPTD_MAX_RESTARTS="${FTRAIN_CKPTD_MAX_RESTARTS:-3}"
export FTRAIN_SPARE_NODES="${FTRAIN_SPARE_NODES:-0}"            # hot spares (submit with --nodes=N+S --no-kill)
export FTRAIN_SPARE_NODELIST="${FTRAIN_SPARE_NODELIST:-}"          # which (default: the last ones, not the batch host)
export FTRAIN_SPARE_CHECK_S="${FTRAIN_SPARE_CHECK_S:-5}"          # how often a training step looks for lost spares
export FTRAIN_ELASTIC="${FTRAIN_ELASTIC:-auto}"              # no spare left: shrink onto the survivors (auto: with dist.reduce = exact), 1, 0
export FTRAIN_ELASTIC_MIN_NODES="${FTRAIN_ELASTIC_MIN_NODES:-1}"    # fewer training nodes than this: requeue instead
export FTRAIN_ELASTIC_GROW_S="${FTRAIN_ELASTIC_GROW_S:-30}"       # while shrunk, ask Slurm this often for nodes to grow back (0: never)
export FTRAIN_REPLICATION="${FTRAIN_REPLICATION:-auto}"         # buddy replication: auto (on with spares or a memory tier), 1, 0
export FTRAIN_REPLICA_MEMORY_GB="${FTRAIN_REPLICA_MEMORY_GB:-8}"      # what a daemon holds for others
export FTRAIN_REPLICATION_MBPS="${FTRAIN_REPLICATION_MBPS:-0}"      # cap on what a daemon sends its buddy (MB/s; 0 = none)
# ---- ftrain's own failure detection (docs/operations.md) ---------------------------------------
export FTRAIN_DETECT="${FTRAIN_DETECT:-1}"                 # 0: leave node failures to Slurm (SlurmdTimeout)
export FTRAIN_HEARTBEAT_PERIOD_S="${FTRAIN_HEARTBEAT_PERIOD_S:-1}"
export FTRAIN_HEARTBEAT_TIMEOUT_S="${FTRAIN_HEARTBEAT_TIMEOUT_S:-3}"    # silence before a node's slurmd is probed
export FTRAIN_PROBE_TIMEOUT_S="${FTRAIN_PROBE_TIMEOUT_S:-2}"
export FTRAIN_BLIP_S="${FTRAIN_BLIP_S:-10}"                # a probe that times out convicts only after this silence
export FTRAIN_HUNG_AFTER_S="${FTRAIN_HUNG_AFTER_S:-60}"          # silence after which a paused node is lost
export FTRAIN_DETECT_PERIOD_S="${FTRAIN_DETECT_PERIOD_S:-0.5}"      # how often the batch-host watchers look
export FTRAIN_AGENT_PERIOD_S="${FTRAIN_AGENT_PERIOD_S:-2}"         # how often the agents follow the job's live nodes
export FTRAIN_NORESPOND_WAIT_S="${FTRAIN_NORESPOND_WAIT_S:-30}"
export FTRAIN_MAX_RESUBMITS="${FTRAIN_MAX_RESUBMITS:-3}"          # batch host dead: resubmissions in a row, at most
export FTRAIN_HANG_REPEAT_WINDOW_S="${FTRAIN_HANG_REPEAT_WINDOW_S:-21600}"  # two hangs on a host this close quarantine it (0: any two of the run)
export FTRAIN_HANG_QUARANTINE_KEEP_S="${FTRAIN_HANG_QUARANTINE_KEEP_S:-86400}"  # a host quarantined for hangs stays out this long (0: the run)
export FTRAIN_RESUBMIT_SAME_SIZE="${FTRAIN_RESUBMIT_SAME_SIZE:-0}"     # 1: a resubmitted job keeps its size and spares

exec "${FTRAIN_BIN}" job --script "${BASH_SOURCE[0]}"
