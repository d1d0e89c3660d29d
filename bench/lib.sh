# shellcheck shell=bash
# bench/lib.sh - the set-up the training benches share (sourced, not run): the binaries, a
# scratch directory removed at exit, a corpus packed from /usr/share/common-licenses, one
# `ftrain launch ... train` run without checkpoints, TensorBoard or a final save, and a loopback
# moto S3 server for the object-store benches.
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_workdir NAME            WORK=/tmp/ftrain-NAME-XXXXXX, removed at exit
#   bench_moto BUCKET [FIXTURE_ARGS...]
#                                 (after bench_workdir) moto's S3 server on a free loopback port,
#                                 killed at exit, log WORK/moto.log; AWS_* exported for it;
#                                 BUCKET made (and FIXTURE_ARGS, e.g. --upload DIR=PREFIX, done)
#                                 by tests/s3_fixture.py, the tests' boto3 fixture
#   bench_pack VOCAB SEQ_LEN      WORK/data (BIN's ftrain pack)
#   bench_train N RUN [ARGS...]   N ranks train into RUN (log RUN.log; on failure its tail
#                                 and exit 1); ARGS: --config, --section.key=value overrides
# BIN: FTRAIN_BIN_DIR, else build/bin of this checkout. MOTO: FTRAIN_MOTO_PYTHONPATH, else
# scripts/install-deps.sh's prefix (PYTHONPATH for moto and boto3).

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${FTRAIN_BIN_DIR:-${BENCH_ROOT}/build/bin}"
BENCH_CORPUS=/usr/share/common-licenses
MOTO="${FTRAIN_MOTO_PYTHONPATH:-/opt/ftrain/py-moto-5.2.1}"

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

bench_moto() {
  local bucket="$1" port
  shift
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  PYTHONPATH="${MOTO}" python3 -m moto.server -H 127.0.0.1 -p "${port}" >"${WORK}/moto.log" 2>&1 &
  MOTO_PID=$!
  # shellcheck disable=SC2064  # expand MOTO_PID and WORK now
  trap "kill '${MOTO_PID}'; rm -rf '${WORK}'" EXIT
  export AWS_ENDPOINT_URL="http://127.0.0.1:${port}" AWS_ACCESS_KEY_ID=AKIABENCH
  export AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
  # Waits for the server (60 s at most), then makes the bucket.
  PYTHONPATH="${MOTO}" python3 "${BENCH_ROOT}/tests/s3_fixture.py" "${AWS_ENDPOINT_URL}" \
    "${bucket}" "$@" >/dev/null
}
