#!/usr/bin/env bash
# Multi-node pack scaling on a Slurm cluster (numbers, never pass/fail): slurm/pack.sh with 1,
# 2 and 3 parts (one node each) on the same corpus. pack_s = parts_s (first part start to last
# part end, from pack.sh's time stamps) + merge_s; MB/s of input and the speed-up over 1 node
# are from pack_s. submit_to_done_s adds Slurm's scheduling latency (seconds on the local
# cluster, where it dominates small runs). Every merged dataset must be identical.
# Usage: bench/pack_scaling.sh   (cluster up: SLURM_CONF set, e.g. eval "$(slurm/local-cluster.sh env)")
#   FTRAIN_PACK_BENCH_MB=32       corpus size (JSON Lines)
#   FTRAIN_PACK_BENCH_THREADS=1   tokenizer threads per part (0: the node's cores). On the
#                                 local cluster every slurmd shares this machine's cores, so 1
#                                 models "one core per node"; more than nproc in total only
#                                 contends.
#   FTRAIN_PACK_BENCH_NODES="1 2 3"
#   FTRAIN_PACK_BENCH_REPEAT=3    rounds over NODES (interleaved, so load from other work hits
#                                 every N alike); the summary takes each N's fastest round
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FTRAIN="${FTRAIN_BIN:-${ROOT}/build/bin/ftrain}"
WORK="${FTRAIN_PACK_BENCH_DIR:-/tmp/ftrain-pack-bench}"
MB="${FTRAIN_PACK_BENCH_MB:-32}"
THREADS="${FTRAIN_PACK_BENCH_THREADS:-1}"
NODES="${FTRAIN_PACK_BENCH_NODES:-1 2 3}"
REPEAT="${FTRAIN_PACK_BENCH_REPEAT:-3}"

[[ -n "${SLURM_CONF:-}" ]] || { echo "pack_scaling: set SLURM_CONF (slurm/local-cluster.sh env)" >&2; exit 2; }
rm -rf "${WORK}"
mkdir -p "${WORK}/in"
trap 'rm -rf "${WORK}"' EXIT
python3 "${ROOT}/bench/tokenizer_bench.py" corpus "${WORK}/in/corpus.jsonl" "${MB}"
bytes="$(stat -c %s "${WORK}/in/corpus.jsonl")"
flags=(--seq-len 1024 --progress none --threads "${THREADS}")
"${FTRAIN}" pack --train-tokenizer --vocab-size 8000 --tokenizer-sample-mb 2 "${flags[@]}" \
  --out "${WORK}/tok" "${WORK}/in" >/dev/null 2>&1
flags+=(--tokenizer "${WORK}/tok/tokenizer.model")
echo "== pack_scaling.sh: $((bytes / 1000000)) MB JSON Lines, ${THREADS} thread(s) per part," \
  "$(nproc) cores on this machine, $(sinfo -h -N -o %N | sort -u | wc -l) nodes" >&2

# span LOGS...: seconds from the first "start" to the last "end" stamp of pack.sh's lines.
span() {
  cat "$@" | awk '/^pack.sh: .* start [0-9.]+$/ {t = $NF; if (a == "" || t < a) a = t}
    /^pack.sh: .* end [0-9.]+ exit/ {t = $(NF - 2); if (t > b) b = t}
    END {printf "%.2f", b - a}'
}

first="$(echo "${NODES}" | awk '{print $1}')"
: >"${WORK}/runs.jsonl"
for ((round = 1; round <= REPEAT; ++round)); do
  for n in ${NODES}; do
    out="${WORK}/out${n}"
    rm -rf "${out}" "${out}.parts"
    start="$(date +%s.%N)"
    FTRAIN_BIN="${FTRAIN}" "${ROOT}/slurm/pack.sh" --parts "${n}" --out "${out}" --wait \
      -- "${flags[@]}" "${WORK}/in" >"${WORK}/submit.out" 2>&1 ||
      { cat "${WORK}/submit.out" "${out}.parts"/*.log >&2; exit 1; }
    end="$(date +%s.%N)"
    if [[ "${n}" != "${first}" ]]; then
      cmp -s "${out}/index.json" "${WORK}/out${first}/index.json" ||
        { echo "pack_scaling: ${n} nodes gave a different dataset" >&2; exit 1; }
    fi
    parts_s="$(span "${out}.parts"/part-*.log)"
    merge_s="$(span "${out}.parts/merge.log")"
    awk -v r="${round}" -v n="${n}" -v p="${parts_s}" -v m="${merge_s}" \
      -v w="$(awk -v a="${start}" -v b="${end}" 'BEGIN {print b - a}')" -v bytes="${bytes}" \
      'BEGIN {printf "{\"round\": %d, \"nodes\": %d, \"parts_s\": %.2f, \"merge_s\": %.2f, \"pack_s\": %.2f, \"mb_per_s\": %.2f, \"submit_to_done_s\": %.2f}\n", r, n, p, m, p + m, bytes / 1e6 / (p + m), w}' |
      tee -a "${WORK}/runs.jsonl"
  done
done
# Fastest round per N, and the speed-up over the first N's fastest.
echo "== fastest of ${REPEAT} rounds" >&2
for n in ${NODES}; do
  best="$(sed -n "s/.*\"nodes\": ${n}, .*\"pack_s\": \([0-9.]*\).*/\1/p" "${WORK}/runs.jsonl" | sort -n | head -1)"
  [[ "${n}" != "${first}" ]] || base="${best}"
  awk -v n="${n}" -v s="${best}" -v b="${base}" -v bytes="${bytes}" \
    'BEGIN {printf "{\"nodes\": %d, \"pack_s\": %.2f, \"mb_per_s\": %.2f, \"speedup\": %.2f}\n", n, s, bytes / 1e6 / s, b / s}'
done
