#!/usr/bin/env bash
# agent.sh - the ftrain node agent, `ftrain agent` (src/orch/agent_runner.h): on one node, its
# checkpoint daemon (restarted when it dies, bounded), its heartbeat, and, on two nodes chosen
# apart from the batch host, the watch of the batch host (declared dead: the job submitted
# again without it). `ftrain job` starts it as one step per node; this script is for running
# it by hand:  srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE slurm/agent.sh
set -euo pipefail
export FTRAIN_HOME="${FTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$(pwd)}}"
exec "${FTRAIN_BIN:-${FTRAIN_HOME}/build/bin/ftrain}" agent "$@"
