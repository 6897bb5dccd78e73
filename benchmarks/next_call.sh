#!/usr/bin/env bash
# One device call for what issues 16 and 19 have left (as of the 2026-12-07 stop),
# fitted to the GPU it lands on and to the call's time limit.
# Usage (device tool, carry [".kb", "runs/h200z"]):
#   . benchmarks/device_env.sh && bash benchmarks/next_call.sh LIMIT_S
# LIMIT_S: the call's limit in seconds (default 540); the sweep takes what the rest leaves.
#   1. issue 16, NEXT_PLAIN=1 (waiting at the 2026-12-07 stop: NEXT_PLAIN_OPS=linalg.pinv.singular,
#      about 100 s a run): the findings of NEXT_PLAIN_OPS as plain torch and again under
#      `kernelaudit run` (h200_session.sh plain, guarded), but those NEXT_PLAIN_DONE's results settled;
#   2. on an H200 (more than 100 GB): issue 19's prefill row against the warp-specialized
#      tile at M = 1024, 4096 and 8192 (benchmarks/prefill_lanes_ab.py; NEXT_PREFILL=1 runs
#      it on an H100 too, where 2026-12-07 measured it; NEXT_PREFILL=0 leaves it out;
#      NEXT_PREFILL_MS picks the M values, default "4096 1024 8192") and the
#      act16 decode timing (NEXT_DECODE=0 leaves it out); the sweep retries the cases an H100
#      skipped for memory (--memory-plan try);
#   3. the GPU bit tests of the table's prefill rows (NEXT_TESTS=1; they passed on an H100
#      on 2026-12-07); the tile tables' other rows timed per shape (NEXT_TABLES=1:
#      h200_session.sh tables; TABLES picks runs: every bf16 decode row was timed by 2026-12-07;
#      left: TABLES="smallk_prefill smallsmall_prefill fp32w_decode fp32w_prefill");
#   4. issue 16: the full grid resumed (runs/h200z) until 60 s before LIMIT_S: on an H200 the
#      cases H100s skipped for memory (448 at the 2026-12-07 stop, each op's smallest first,
#      the ops in turns); the slow pass at 120 s has nothing left (92 cases need 600 s).
# Outputs: $OUT/h200_results.tgz (each h200_session.sh step: plain/, the sweep's store for
# benchmarks/take_store.sh), $OUT/extra/prefill_ab_m<M>.json and .log, $OUT/extra/gpu_tests.log.
set -u
limit=${1:-540}
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
X=${OUT:-/tmp/out}/extra
mkdir -p "$X"
if [ "${NEXT_PLAIN:-0}" = 1 ]; then
  R=benchmarks/results/2026-12-07-h100-svdvals-guarded-mma-rows-slow-pass
  PLAIN_OPS=${NEXT_PLAIN_OPS:-} PLAIN_GUARDED=1 PLAIN_TIMEOUT_S=100 PLAIN_UNTIL_S=$((limit / 3)) \
    PLAIN_DONE=${NEXT_PLAIN_DONE-$R/plain/results.json $R/plain_call3/results.json} \
    bash benchmarks/h200_session.sh plain
fi
prefill=${NEXT_PREFILL:-}; [ -z "$prefill" ] && { [ "${mem:-0}" -gt 100000 ] && prefill=1 || prefill=0; }
if [ "$prefill" = 1 ]; then
  for m in ${NEXT_PREFILL_MS:-4096 1024 8192}; do
    timeout 150 python3 benchmarks/prefill_lanes_ab.py --m $m --variants ws,table --rounds 5 \
      --out "$X/prefill_ab_m$m.json" > "$X/prefill_ab_m$m.log" 2>&1
    tail -4 "$X/prefill_ab_m$m.log"
  done
fi
if [ "${NEXT_TESTS:-0}" = 1 ]; then
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_repro_ieee_tiled_gpu.py \
    -k "cast_once or compiled_lanes_linear or table_prefill_row" > "$X/gpu_tests.log" 2>&1
  tail -4 "$X/gpu_tests.log"
fi
if [ "${NEXT_TABLES:-0}" = 1 ]; then
  bash benchmarks/h200_session.sh tables
fi
if [ "${mem:-0}" -gt 100000 ] && [ "${NEXT_DECODE:-1}" = 1 ]; then
  GEMM_SECTIONS=decode GEMM_ARGS="--decode-ms 1,2,4,16" GEMM_TIMEOUT_S=150 GEMM_TESTS=0 \
    bash benchmarks/h200_session.sh gemm
fi
if [ "${mem:-0}" -gt 100000 ]; then
  export SWEEP_ARGS="--memory-plan try"
fi
left=$((limit - SECONDS - 60))
if [ "$left" -gt 60 ]; then
  SWEEP_UNTIL_S=$left REPORT=0 bash benchmarks/h200_session.sh sweep
else
  echo "next_call: ${left} s left for the sweep: not started"
fi
