# shellcheck shell=bash
# bench/lib.sh - the set-up the training benches share (sourced, not run): the binaries, a
# scratch directory removed at exit, a corpus packed from /usr/share/common-licenses, and one
# `ftrain launch ... train` run without checkpoints, TensorBoard or a final save.
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_workdir NAME            WORK=/tmp/ftrain-NAME-XXXXXX, removed at exit
#   bench_pack VOCAB SEQ_LEN      WORK/data (BIN's ftrain pack)
#   bench_train N RUN [ARGS...]   N ranks train into RUN (log RUN.log; on failure its tail
#                                 and exit 1); ARGS: --config, --section.key=value overrides
# BIN: FTRAIN_BIN_DIR, else build/bin of this checkout.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${BENCH_ROOT}/build/bin}"
BENCH_CORPUS=/usr/share/common-licenses

bench_workdir() {
  WORK="$(mktemp -d "/tmp/ftrain-$1-XXXXXX")"
  # shellcheck disable=SC2064  # expand WORK now
  trap "rm -rf '${WORK}'" EXIT
}

bench_pack() {
  "${BIN}/ftrain" pack --train-tokenizer --vocab-size "$1" --seq-len "$2" --progress none \
    --out "${WORK}/data" "${BENCH_CORPUS}" >/dev/null 2>"${WORK}/pack.log" ||
    { cat "${WORK}/pack.log" >&2; exit 1; }
}

bench_train() {
  local n="$1" run="$2"
  shift 2
  "${BIN}/ftrain" launch --nproc "${n}" -- train --data.path="${WORK}/data" --run.dir="${run}" \
    --ckpt.save_final=false --ckpt.every_steps=0 --ckpt.every_minutes=0 \
    --metrics.tensorboard=false "$@" >"${run}.log" 2>&1 ||
    { tail -20 "${run}.log" >&2; exit 1; }
}
