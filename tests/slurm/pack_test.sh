#!/usr/bin/env bash
# pack_test.sh - slurm/pack.sh on the local Slurm cluster: 3 array tasks (`ftrain pack --part
# I/3`, on 3 different nodes) and a merge job after them must write the dataset a single local
# `ftrain pack` of the same inputs writes, byte for byte (a JSON Lines file split across the
# parts, a plain-text and a gzip file whole, bad records skipped); resubmitting the same command
# keeps every finished part. Exit 0 pass, 1 fail, 77 skip (no Slurm tools).
set -euo pipefail

# ---- settings ------------------------------------------------------------------------------
SLURM_TEST_NAME="pack_test"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN="${FTRAIN_BIN:-${ROOT}/build/bin/ftrain}"
IDLE_TIMEOUT_S=60
JOB_TIMEOUT_S=120

# shellcheck source=tests/slurm/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

WORK_DIR=""
PASSED=0
cleanup() {
  local rc=$? id
  if [[ -n "${WORK_DIR}" ]]; then
    while read -r id; do cancel_job "${id}"; done < <(grep -ho 'job [0-9]*' \
      "${WORK_DIR}"/submit*.out 2>/dev/null | awk '{print $2}')
  fi
  work_dir_cleanup
  exit "${rc}"
}
trap cleanup EXIT

[[ -x "${FTRAIN}" ]] || fail "ftrain binary not found at ${FTRAIN}; build first"
slurm_test_start "${IDLE_TIMEOUT_S}"
in="${WORK_DIR}/in"
mkdir -p "${in}"
python3 - "${in}" <<'PY'
import gzip, json, random, sys
d = sys.argv[1]
rng = random.Random(5)
syl = ["ka", "to", "ri", "men", "sa", "lo", "ve", "dan", "дом", "日", "für", "qu"]
def text(n):
    return " ".join("".join(rng.choice(syl) for _ in range(rng.randint(1, 3))) for _ in range(n))
with open(f"{d}/big.jsonl", "w") as f:
    for i in range(4000):
        f.write("{oops\n" if i % 97 == 96 else json.dumps({"text": text(rng.randint(10, 60))}) + "\n")
with open(f"{d}/notes.txt", "w") as f:
    f.write(text(20000))
with gzip.GzipFile(f"{d}/z.jsonl.gz", "wb", mtime=0) as f:
    for i in range(300):
        f.write((json.dumps({"text": text(30)}) + "\n").encode())
PY
flags=(--seq-len 64 --shard-rows 400 --chunk-rows 40 --on-bad-record skip --progress none)
"${FTRAIN}" pack --train-tokenizer --vocab-size 300 "${flags[@]}" --out "${WORK_DIR}/tok" \
  "${in}" >"${WORK_DIR}/tok.out" 2>&1 || { cat "${WORK_DIR}/tok.out"; fail "tokenizer training failed"; }
flags+=(--tokenizer "${WORK_DIR}/tok/tokenizer.model")
"${FTRAIN}" pack "${flags[@]}" --out "${WORK_DIR}/single" "${in}" >"${WORK_DIR}/single.out" 2>&1 ||
  { cat "${WORK_DIR}/single.out"; fail "the single pack failed"; }

submit() {  # submit LOG: slurm/pack.sh with 3 parts, waiting for the merge
  FTRAIN_BIN="${FTRAIN}" timeout "${JOB_TIMEOUT_S}" "${ROOT}/slurm/pack.sh" --parts 3 \
    --out "${WORK_DIR}/merged" --force --wait --sbatch "--time=5" -- "${flags[@]}" "${in}" \
    >"$1" 2>&1 || { cat "$1" "${WORK_DIR}"/merged.parts/*.log; fail "slurm/pack.sh failed"; }
}
start="$(now_s)"
submit "${WORK_DIR}/submit1.out"
log "parts and merge done in $(elapsed_s "${start}" "$(now_s)") s"
diff -r "${WORK_DIR}/single" "${WORK_DIR}/merged" || fail "merged dataset differs from the single pack"
[[ -s "${WORK_DIR}/merged/bad-records.jsonl" ]] || fail "no bad-records.jsonl in the merge"
nodes="$(grep -ho '(node[^)]*)' "${WORK_DIR}"/merged.parts/part-*.log | sort -u | wc -l)"
((nodes == 3)) || fail "the 3 parts ran on ${nodes} distinct nodes, expected 3"
grep -q 'merged 3 parts' "${WORK_DIR}/merged.parts/merge.log" || fail "merge log has no summary"

# Resubmitted: every part is already finished and is kept; the merge writes the same bytes.
submit "${WORK_DIR}/submit2.out"
kept="$(grep -l 'was already packed' "${WORK_DIR}"/merged.parts/part-*.log | wc -l)"
((kept == 3)) || fail "resubmitted: ${kept} of 3 parts kept, expected all"
diff -r "${WORK_DIR}/single" "${WORK_DIR}/merged" || fail "re-merged dataset differs"
log "PASS: 3 parts on 3 nodes merged byte-identical to a single pack; resubmission kept them"
PASSED=1
