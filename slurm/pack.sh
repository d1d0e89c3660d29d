#!/usr/bin/env bash
# pack.sh - `ftrain pack` spread over a Slurm cluster: an sbatch array with one task per part
# (`ftrain pack --part I/N`, a whole node each) and a merge job that starts when every part
# succeeded (--dependency=afterok:ARRAY) and writes the dataset a single `ftrain pack` of the
# same inputs writes, byte for byte (`ftrain pack merge`). See docs/data.md, "Many nodes".
#
#   slurm/pack.sh --parts N --out OUT [--parts-dir DIR] [--force] [--wait]
#                 [--sbatch 'EXTRA SBATCH ARGS'] -- PACK_FLAGS... INPUT...
#
# PACK_FLAGS are `ftrain pack`'s (--tokenizer, --seq-len, --on-bad-record, ...) without --out
# and --part. Parts go to DIR/part-I (default OUT.parts, on a file system every node sees),
# logs to DIR/part-I.log and DIR/merge.log. Resubmitting the same command keeps the parts that
# finished (each task checks its part.json and tokens.bin) and redoes the others; --force makes
# the merge replace a dataset already in OUT. --wait returns when the merge job ends, with its
# exit status. Prints the two job ids. FTRAIN_BIN overrides the ftrain binary.
# Exit codes: 0 submitted (or, with --wait, merged), 1 a job failed, 2 usage.
set -euo pipefail

# ---- inside the jobs -----------------------------------------------------------------------
if [[ "${1:-}" == "__part" ]]; then  # __part N DIR FTRAIN PACK_ARGS...
  n="$2" dir="$3" ftrain="$4"
  shift 4
  i="${SLURM_ARRAY_TASK_ID:?__part runs as an sbatch array task}"
  echo "pack.sh: part ${i}/${n} on $(hostname) (${SLURMD_NODENAME:-?}) start $(date +%s.%N)"
  rc=0
  "${ftrain}" pack --part "${i}/${n}" --out "${dir}/part-${i}" "$@" || rc=$?
  echo "pack.sh: part ${i}/${n} end $(date +%s.%N) exit ${rc}"
  exit "${rc}"
fi
if [[ "${1:-}" == "__merge" ]]; then  # __merge N DIR OUT FORCE FTRAIN
  n="$2" dir="$3" out="$4" force="$5" ftrain="$6"
  part_dirs=()
  for ((i = 0; i < n; ++i)); do part_dirs+=("${dir}/part-${i}"); done
  force_flag=()
  if [[ "${force}" == 1 ]]; then force_flag=(--force); fi
  echo "pack.sh: merge start $(date +%s.%N)"
  rc=0
  "${ftrain}" pack merge "${force_flag[@]}" "${out}" "${part_dirs[@]}" || rc=$?
  echo "pack.sh: merge end $(date +%s.%N) exit ${rc}"
  exit "${rc}"
fi

# ---- submitting ----------------------------------------------------------------------------
usage() {
  sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  echo "pack.sh: $*" >&2
  exit 2
}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FTRAIN_BIN="${FTRAIN_BIN:-${here}/../build/bin/ftrain}"
parts="" out="" parts_dir="" force=0 wait=0 extra=""
while (($#)); do
  case "$1" in
    --parts) parts="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    --parts-dir) parts_dir="${2:-}"; shift 2 ;;
    --sbatch) extra="${2:-}"; shift 2 ;;
    --force) force=1; shift ;;
    --wait) wait=1; shift ;;
    --) shift; break ;;
    *) usage "unknown argument '$1' (pack flags and inputs go after --)" ;;
  esac
done
[[ "${parts}" =~ ^[1-9][0-9]*$ ]] || usage "--parts N is required (N >= 1)"
[[ -n "${out}" ]] || usage "--out OUT is required"
(($#)) || usage "give the pack flags and inputs after --"
for a in "$@"; do
  case "${a}" in
    --out | --out=* | --part | --part=*) usage "'${a}' is set by pack.sh; leave it out" ;;
  esac
done
[[ -x "${FTRAIN_BIN}" ]] || usage "ftrain binary not found at ${FTRAIN_BIN} (set FTRAIN_BIN)"
FTRAIN_BIN="$(cd "$(dirname "${FTRAIN_BIN}")" && pwd)/$(basename "${FTRAIN_BIN}")"
# The torch-free binary that `ftrain pack` execs, when it is there: saves loading LibTorch
# (~1 s) in every task.
if [[ -x "$(dirname "${FTRAIN_BIN}")/ftrain-data" ]]; then FTRAIN_BIN="$(dirname "${FTRAIN_BIN}")/ftrain-data"; fi
out="$(mkdir -p "$(dirname "${out}")" && cd "$(dirname "${out}")" && pwd)/$(basename "${out}")"
parts_dir="${parts_dir:-${out}.parts}"
mkdir -p "${parts_dir}"
parts_dir="$(cd "${parts_dir}" && pwd)"
script="${here}/pack.sh"

# shellcheck disable=SC2086  # EXTRA SBATCH ARGS are words on purpose
array_id="$(sbatch --parsable --job-name=ftrain-pack --array="0-$((parts - 1))" --nodes=1 \
  --ntasks=1 --exclusive --output="${parts_dir}/part-%a.log" --chdir="${parts_dir}" ${extra} \
  "${script}" __part "${parts}" "${parts_dir}" "${FTRAIN_BIN}" "$@")"
array_id="${array_id%%;*}"
wait_flag=()
if ((wait)); then wait_flag=(--wait); fi
echo "pack.sh: parts job ${array_id} (array 0-$((parts - 1))) -> ${parts_dir}/part-I"
# shellcheck disable=SC2086
merge_id="$(sbatch --parsable --job-name=ftrain-pack-merge --dependency="afterok:${array_id}" \
  --kill-on-invalid-dep=yes --nodes=1 --ntasks=1 --output="${parts_dir}/merge.log" \
  --chdir="${parts_dir}" "${wait_flag[@]}" ${extra} \
  "${script}" __merge "${parts}" "${parts_dir}" "${out}" "${force}" "${FTRAIN_BIN}")" || {
  echo "pack.sh: merge job ${merge_id:-?} failed; see ${parts_dir}/merge.log and part-*.log" >&2
  exit 1
}
merge_id="${merge_id%%;*}"
echo "pack.sh: merge job ${merge_id} (after every part succeeds) -> ${out}"
if ((wait)); then
  # sbatch --wait returns 0 for a merge cancelled because a part failed: check the state.
  state="$(scontrol -o show job "${merge_id}" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')"
  if [[ "${state}" != COMPLETED || ! -f "${out}/index.json" ]]; then
    echo "pack.sh: merge job ${merge_id} ended ${state:-?}, no dataset in ${out}; see" \
      "${parts_dir}/part-*.log and merge.log" >&2
    exit 1
  fi
fi
