#!/usr/bin/env bash
# One device call for what issues 16 and 19 have left (as of 2026-12-07),
# fitted to the GPU it lands on and to the call's time limit.
# Usage (device tool, carry [".kb", "runs/h200z"]):
#   . benchmarks/device_env.sh && bash benchmarks/next_call.sh LIMIT_S
# LIMIT_S: the call's limit in seconds (default 540); the sweep takes what the rest leaves.
#   1. issue 19: the table's prefill row, fed by TMA from operands cast once (the cast pass
#      now reads whole sectors along k), against the warp-specialized tile at M = 4096, 1024
#      and 8192 (benchmarks/prefill_lanes_ab.py; the casts timed alone; at 4096 the 2 x 4
#      thread tile too), ncu of the passes
#      and the casts (h200_session.sh castncu; NEXT_NCU=0 leaves it out), and the GPU bit
#      tests of the table's rows (NEXT_TESTS=0 leaves them out);
#   2. on an H200 (more than 100 GB): the act16 decode timing, and the sweep retries the
#      cases an H100 skipped for memory (--memory-plan try);
#   3. issue 16: the full grid's slow pass resumed (runs/h200z) until 60 s before LIMIT_S.
# Outputs: $OUT/h200_results.tgz (each h200_session.sh step; the sweep's store for
# benchmarks/take_store.sh), $OUT/extra/prefill_ab_m<M>.json and .log, $OUT/extra/gpu_tests.log.
set -u
limit=${1:-540}
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
X=${OUT:-/tmp/out}/extra
mkdir -p "$X"
for m in 4096 1024 8192; do
  v=ws,table; [ $m = 4096 ] && v=ws,table,cast_tt24
  timeout 150 python3 benchmarks/prefill_lanes_ab.py --m $m --variants $v --rounds 5 \
    --out "$X/prefill_ab_m$m.json" > "$X/prefill_ab_m$m.log" 2>&1
  tail -5 "$X/prefill_ab_m$m.log"
done
[ "${NEXT_NCU:-1}" = 1 ] && NCU_TIMEOUT_S=150 bash benchmarks/h200_session.sh castncu
if [ "${NEXT_TESTS:-1}" = 1 ]; then
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_repro_ieee_tiled_gpu.py \
    -k "cast_once or compiled_lanes_linear or table_prefill_row" > "$X/gpu_tests.log" 2>&1
  tail -4 "$X/gpu_tests.log"
fi
if [ "${mem:-0}" -gt 100000 ]; then
  GEMM_SECTIONS=decode GEMM_ARGS="--decode-ms 1,2,4,16" GEMM_TIMEOUT_S=150 GEMM_TESTS=0 \
    bash benchmarks/h200_session.sh gemm
  export SWEEP_ARGS="--memory-plan try"
fi
left=$((limit - SECONDS - 60))
if [ "$left" -gt 60 ]; then
  SWEEP_UNTIL_S=$left REPORT=0 bash benchmarks/h200_session.sh sweep
else
  echo "next_call: ${left} s left for the sweep: not started"
fi
