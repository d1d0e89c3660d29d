#!/usr/bin/env bash
# Pack from object storage against pack from the same local files (printed, never pass/fail):
# starts moto's S3 server (scripts/install-deps.sh's prefix) on a free loopback port, uploads a
# corpus of the repository's docs copied COPIES times, packs it from the directory and from
# s3://, checks the shards are identical and prints the pack's text MB/s for both and the ratio.
# Loopback moto is not a real store: the numbers show the S3 path's own cost (listing, signing,
# Range parts, the part-ahead fetch), not a network's.
# usage: bench/s3_pack_bench.sh [BIN_DIR]   (default: build/bin)
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN="${1:-${BIN}}"
ROOT="${BENCH_ROOT}"
COPIES="${FTRAIN_S3_BENCH_COPIES:-20}"
THREADS="${FTRAIN_S3_BENCH_THREADS:-2}"
bench_workdir s3-bench
mkdir -p "${WORK}/corpus/docs"
for i in $(seq 1 "${COPIES}"); do cat "${ROOT}"/docs/*.md >"${WORK}/corpus/docs/copy${i}.md"; done
bench_moto bench --upload "${WORK}/corpus=corpus"
"${BIN}/ftrain" pack --train-tokenizer --vocab-size 2000 --seq-len 512 --progress none \
  --out "${WORK}/tok" "${WORK}/corpus/docs/copy1.md" >/dev/null 2>&1

mbs() { sed -n 's/.*MB of text) in \([0-9.]*\) s: \([0-9.]*\) MB\/s.*/\2/p' "$1"; }
pack() {  # pack OUT INPUT
  "${BIN}/ftrain" pack --tokenizer "${WORK}/tok/tokenizer.model" --seq-len 512 \
    --threads "${THREADS}" --progress none --out "$1" "$2" >"$1.log" 2>&1 || { cat "$1.log" >&2; exit 1; }
}
echo "== s3_pack_bench: $(du -sh "${WORK}/corpus" | cut -f1) in ${COPIES} files, ${THREADS} threads," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
pack "${WORK}/local" "${WORK}/corpus"
pack "${WORK}/s3" "s3://bench/corpus"
for f in "${WORK}"/local/shard-*.bin; do cmp "${f}" "${WORK}/s3/$(basename "${f}")"; done
local_mbs="$(mbs "${WORK}/local.log")"
s3_mbs="$(mbs "${WORK}/s3.log")"
echo "pack local: ${local_mbs} MB/s of text"
echo "pack s3://: ${s3_mbs} MB/s of text (shards identical)"
python3 -c "print(f's3/local: {${s3_mbs} / ${local_mbs}:.3f}')"
