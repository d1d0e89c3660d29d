#!/usr/bin/env bash
# Data pipeline numbers (printed, never pass/fail): `ftrain pack` throughput in MB of text per
# second with 1 and with all cores on text already on the machine, then bench/data_bench.cc
# (reader vs raw sequential read, warm and cold; prefetch wait per batch).
# Usage: bench/data_bench.sh   (after building ftrain, ftrain-data and data_bench)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
WORK="${FTRAIN_DATA_BENCH_DIR:-/tmp/ftrain-data-bench}"
GB="${FTRAIN_DATA_BENCH_GB:-2}"
VOCAB="${FTRAIN_DATA_BENCH_VOCAB:-8000}"
SEQ_LEN=2048
CORPUS=(/usr/share/common-licenses /usr/share/doc)
CORES="$(nproc)"

mkdir -p "${WORK}"
# Everything written here goes at exit, unless FTRAIN_DATA_BENCH_KEEP=1 (reruns then reuse the
# synthetic dataset).
cleanup() {
  if [ "${FTRAIN_DATA_BENCH_KEEP:-0}" = 1 ]; then
    rm -rf "${WORK}/tok" "${WORK}/pack1" "${WORK}/packN"
  else
    rm -rf "${WORK}"
  fi
}
trap cleanup EXIT

echo "== data_bench.sh: corpus ${CORPUS[*]}, vocab ${VOCAB}, seq_len ${SEQ_LEN}, ${CORES} cores" >&2
# Tokenizer training (and a first pack with all cores), timed as a whole.
start=$(date +%s.%N)
"${BIN}/ftrain" pack --train-tokenizer --vocab-size "${VOCAB}" --seq-len "${SEQ_LEN}" \
  --out "${WORK}/tok" --force --skip-invalid-utf8 --progress none "${CORPUS[@]}" \
  2>"${WORK}/train.log" >/dev/null
end=$(date +%s.%N)
train_s=$(sed -n 's/.*pack: tokenizer trained in \([0-9.]*\) s.*/\1/p' "${WORK}/train.log")
printf '{"bench":"pack_train_tokenizer","vocab":%s,"train_s":%s,"total_s":%.1f}\n' \
  "${VOCAB}" "${train_s}" "$(echo "${end} - ${start}" | bc)"

for threads in 1 "${CORES}"; do
  out="${WORK}/pack1"
  [ "${threads}" = 1 ] || out="${WORK}/packN"
  "${BIN}/ftrain" pack --tokenizer "${WORK}/tok/tokenizer.model" --seq-len "${SEQ_LEN}" \
    --out "${out}" --force --threads "${threads}" --skip-invalid-utf8 --progress none \
    "${CORPUS[@]}" 2>"${WORK}/pack.log" >/dev/null
  # "pack: wrote ... (184.064 MB of text) in 17.6 s: 10.4 MB/s; data version ..."
  line=$(grep 'pack: wrote' "${WORK}/pack.log")
  mb=$(echo "${line}" | sed -n 's/.*(\([0-9.]*\) MB of text) in \([0-9.]*\) s.*/\1/p')
  secs=$(echo "${line}" | sed -n 's/.*(\([0-9.]*\) MB of text) in \([0-9.]*\) s.*/\2/p')
  printf '{"bench":"pack","threads":%s,"text_mb":%s,"seconds":%s,"text_mb_per_s":%.2f,"per_core":%.2f}\n' \
    "${threads}" "${mb}" "${secs}" "$(echo "${mb} / ${secs}" | bc -l)" \
    "$(echo "${mb} / ${secs} / ${threads}" | bc -l)"
done
cmp -s "${WORK}/pack1/index.json" "${WORK}/packN/index.json" &&
  echo '{"bench":"pack_identical_across_thread_counts","ok":true}' ||
  echo '{"bench":"pack_identical_across_thread_counts","ok":false}'

"${BIN}/data_bench" --dir "${WORK}/synthetic" --gb "${GB}" 2>/dev/null
