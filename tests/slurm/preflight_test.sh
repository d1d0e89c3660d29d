#!/usr/bin/env bash
# preflight_test.sh - slurm/train.sh's pre-flight verdict without a cluster: the real script
# (the real `ftrain paths`) with stand-ins for srun and scontrol, the stand-in srun ending as
# the pre-flight commcheck would:
#   exit 3:   every collective correct, rank 0 could not write RUN/commcheck.json: the start
#             must name the file, not the network (record preflight_failed/commcheck_record);
#   exit 137: a collective failed or a rank died: "fix the nodes or the network"
#             (preflight_failed/commcheck).
# Neither starts the training (no second srun). Exit 0 pass, 1 fail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN_BIN="${FTRAIN_BIN:-${REPO}/build/bin/ftrain}"
[[ -x "${FTRAIN_BIN}" ]] || { echo "preflight_test: no ${FTRAIN_BIN}; build first" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-preflight.XXXXXX")"
cleanup() {
  local rc=$?
  if ((rc == 0)); then rm -rf "${WORK}"; else echo "kept ${WORK}" >&2; fi
}
trap cleanup EXIT
log() { echo "[$(date '+%T')] preflight_test: $*"; }
fail() { echo "preflight_test: FAIL: $*" >&2; exit 1; }

mkdir -p "${WORK}/bin"
cat >"${WORK}/bin/srun" <<'STUB'
#!/usr/bin/env bash
echo "$*" >>"${STUB_STATE}/srun_calls"
exit "${STUB_SRUN_RC}"
STUB
cat >"${WORK}/bin/scontrol" <<'STUB'
#!/usr/bin/env bash
if [[ "$1 $2" == "show hostnames" ]]; then echo node1; exit 0; fi
echo "scontrol stand-in: unexpected: $*" >&2
exit 1
STUB
chmod +x "${WORK}/bin/srun" "${WORK}/bin/scontrol"

start() {  # start NAME SRUN_RC: train.sh as job 43's first start; sets out, run
  run="${WORK}/$1/run"
  mkdir -p "${run}" "${WORK}/$1/state"
  local rc=0
  out="$(env -i PATH="${WORK}/bin:${PATH}" HOME="${HOME:-/tmp}" STUB_SRUN_RC="$2" \
    STUB_STATE="${WORK}/$1/state" SLURM_JOB_ID=43 SLURM_JOB_NODELIST=node1 FTRAIN_CKPTD=0 \
    FTRAIN_HOME="${REPO}" FTRAIN_BIN="${FTRAIN_BIN}" FTRAIN_CONFIG="${REPO}/configs/tiny.cfg" \
    FTRAIN_RUN_DIR="${run}" FTRAIN_DATA=/nonexistent timeout 60 bash "${REPO}/slurm/train.sh" 2>&1)" ||
    rc=$?
  ((rc == 1)) || fail "$1: train.sh exited ${rc}, not 1: ${out}"
  [[ "$(wc -l <"${WORK}/$1/state/srun_calls")" == 1 && "$(cat "${WORK}/$1/state/srun_calls")" == *" commcheck "* ]] ||
    fail "$1: srun calls other than the one pre-flight commcheck: $(cat "${WORK}/$1/state/srun_calls")"
}

start record 3
[[ "${out}" == *"pre-flight: cannot write ${run}/commcheck.json: see rank 0's commcheck error line above; not starting the training"* ]] ||
  fail "record: the start did not name the record file: ${out}"
[[ "${out}" != *"network"* ]] || fail "record: blamed the network: ${out}"
grep -q '"event":"preflight_failed","cause":"commcheck_record","file":"'"${run}"'/commcheck.json"}' "${run}/restarts.jsonl" ||
  fail "record: no preflight_failed/commcheck_record record: $(cat "${run}/restarts.jsonl")"
log "record: exit 3 names ${run}/commcheck.json, not the network"

start network 137
[[ "${out}" == *"pre-flight commcheck FAILED: not starting the training (fix the nodes or the network)"* ]] ||
  fail "network: the start did not blame the nodes or the network: ${out}"
[[ "${out}" != *"cannot write"* ]] || fail "network: blamed the record: ${out}"
grep -q '"event":"preflight_failed","cause":"commcheck"}' "${run}/restarts.jsonl" ||
  fail "network: no preflight_failed/commcheck record: $(cat "${run}/restarts.jsonl")"
log "network: a failed check with a writable run directory blames the nodes or the network"
log "PASS"
