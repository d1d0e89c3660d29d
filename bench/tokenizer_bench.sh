#!/usr/bin/env bash
# Tokenizer throughput against the peer (numbers, never pass/fail), all in one run on the same
# text: ftrain's tokenizer.json BPE vs Hugging Face `tokenizers` on one core, ftrain's
# SentencePiece path vs sentencepiece's Python module on one core, then `ftrain pack` with 1
# thread and with every core. Prints JSON lines and the ratios; token counts must agree.
# Usage: bench/tokenizer_bench.sh   (after building ftrain, ftrain-data and tokenizer_bench)
#   FTRAIN_TOK_BENCH_TOKENIZER=DIR|tokenizer.json  a real tokenizer instead of a trained one
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${ROOT}/build/bin}"
WORK="${FTRAIN_TOK_BENCH_DIR:-/tmp/ftrain-tok-bench}"
MB="${FTRAIN_TOK_BENCH_MB:-20}"
VOCAB="${FTRAIN_TOK_BENCH_VOCAB:-32000}"
REPEAT="${FTRAIN_TOK_BENCH_REPEAT:-2}"
TOKENIZER="${FTRAIN_TOK_BENCH_TOKENIZER:-}"
HF_PYTHONPATH="$(bash "${ROOT}/scripts/install-deps.sh" --hf-pythonpath)"
PY="${ROOT}/bench/tokenizer_bench.py"
CORES="$(nproc)"

mkdir -p "${WORK}"
trap 'rm -rf "${WORK}"' EXIT

echo "== tokenizer_bench.sh: ${MB} MB corpus, ${CORES} cores" >&2
python3 "${PY}" corpus "${WORK}/corpus.jsonl" "${MB}"
if [ -z "${TOKENIZER}" ]; then
  PYTHONPATH="${HF_PYTHONPATH}" python3 "${PY}" train "${WORK}/hf" "${WORK}/corpus.jsonl" "${VOCAB}"
  TOKENIZER="${WORK}/hf"
fi
json_tok="${TOKENIZER}"
[ -d "${json_tok}" ] && json_tok="${json_tok}/tokenizer.json"

# field NAME LINE: a number from a JSON line.
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" <<<"$2"; }

compare() {
  local ours="$1" peer="$2" what="$3"
  echo "${ours}"
  echo "${peer}"
  if [ "$(field tokens "${ours}")" != "$(field tokens "${peer}")" ]; then
    echo "tokenizer_bench: ${what}: token counts differ" >&2
  fi
  printf '{"bench":"%s","ratio_ftrain_over_peer":%.2f}\n' "${what}" \
    "$(echo "$(field mb_s "${ours}") / $(field mb_s "${peer}")" | bc -l)"
}

compare "$("${BIN}/tokenizer_bench" --tokenizer "${TOKENIZER}" --text "${WORK}/corpus.jsonl" \
  --repeat "${REPEAT}")" \
  "$(PYTHONPATH="${HF_PYTHONPATH}" python3 "${PY}" hf "${json_tok}" "${WORK}/corpus.jsonl" \
    "${REPEAT}")" "tokenizer.json_one_core"

# SentencePiece: a BPE .model trained by ftrain pack, against sentencepiece's Python module.
if /usr/bin/python3 -c "import sentencepiece" 2>/dev/null; then
  "${BIN}/ftrain" pack --train-tokenizer --tokenizer-type bpe --vocab-size 8000 --seq-len 2048 \
    --out "${WORK}/spm" --progress none "${WORK}/corpus.jsonl" >/dev/null 2>&1
  compare "$("${BIN}/tokenizer_bench" --tokenizer "${WORK}/spm/tokenizer.model" \
    --text "${WORK}/corpus.jsonl" --repeat "${REPEAT}")" \
    "$(/usr/bin/python3 "${PY}" spm "${WORK}/spm/tokenizer.model" "${WORK}/corpus.jsonl" \
      "${REPEAT}")" "sentencepiece_one_core"
else
  echo "tokenizer_bench: no sentencepiece Python module (python3-sentencepiece): skipped" >&2
fi

# ftrain pack end to end (read, tokenize, write) with 1 thread and with every core: text MB per
# wall second, and per CPU second of the process (user + system; the machine may be shared).
TIMEFORMAT='%R %U %S'
for threads in 1 "${CORES}"; do
  { time "${BIN}/ftrain" pack --tokenizer "${TOKENIZER}" --seq-len 2048 --threads "${threads}" \
    --out "${WORK}/pack${threads}" --force --progress none "${WORK}/corpus.jsonl" \
    2>"${WORK}/pack.log" >/dev/null; } 2>"${WORK}/time.txt"
  read -r wall user sys <"${WORK}/time.txt"
  mb=$(sed -n 's/.* tokens from [0-9]* documents (\([0-9.]*\) MB of text).*/\1/p' "${WORK}/pack.log")
  printf '{"bench":"pack_tokenizer_json","threads":%s,"mb":%s,"wall_s":%s,"cpu_s":%.2f,' \
    "${threads}" "${mb}" "${wall}" "$(echo "${user} + ${sys}" | bc -l)"
  printf '"wall_mb_s":%.2f,"mb_per_cpu_s":%.2f}\n' "$(echo "${mb} / ${wall}" | bc -l)" \
    "$(echo "${mb} / (${user} + ${sys})" | bc -l)"
done
cmp "${WORK}/pack1/index.json" "${WORK}/pack${CORES}/index.json" >/dev/null ||
  echo "tokenizer_bench: the 1-thread and ${CORES}-thread packs differ" >&2
