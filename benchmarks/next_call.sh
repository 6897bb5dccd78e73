#!/usr/bin/env bash
# One device call for what issues 16 and 19 have left (as of 2026-12-07, second session),
# fitted to the GPU it lands on and to the call's time limit.
# Usage (device tool, carry [".kb", "runs/h200z"]):
#   . benchmarks/device_env.sh && bash benchmarks/next_call.sh LIMIT_S
# LIMIT_S: the call's limit in seconds (default 540); the sweep takes what the rest leaves.
#   1. issue 19: the cast-once prefill pass (Tiles.cast_once: operands cast to fp32 once,
#      fed by TMA) against the table tile, 3, 4 and 6 stages (benchmarks/prefill_lanes_ab.py),
#      ncu of it beside the table tile where its bits are the table's, and its GPU bit tests;
#   2. issue 16: linalg.matrix_rank's finding as plain torch and under the guard (the
#      snippet now runs with the sweep workers' allocator settings);
#   3. on an H200 (more than 100 GB): the act16 decode timing, and the sweep retries the
#      cases an H100 skipped for memory (--memory-plan try);
#   4. issue 16: the full grid's slow pass resumed (runs/h200z) until 60 s before LIMIT_S.
# Outputs: $OUT/h200_results.tgz (each h200_session.sh step; the sweep's store for
# benchmarks/take_store.sh), $OUT/extra/gpu_tests.log and $OUT/extra/plain.log.
set -u
limit=${1:-540}
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
X=${OUT:-/tmp/out}/extra
mkdir -p "$X"
PREFILLAB_TIMEOUT_S=150 PREFILLAB_ARGS="--variants ws,cast_s3,cast_s4,cast_s6 --rounds 5" \
  bash benchmarks/h200_session.sh prefillab
# where the cast-once pass's time goes, once its bits are the table's (the step packed its JSON away)
if tar xzf "${OUT:-/tmp/out}/h200_results.tgz" -O h200/prefill_lanes_ab.json 2>/dev/null | python3 -c \
    "import json, sys; sys.exit(0 if json.load(sys.stdin)['rows']['cast_s4']['same_bits'] else 1)"; then
  NCU_TIMEOUT_S=150 bash benchmarks/h200_session.sh castncu
fi
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_repro_ieee_tiled_gpu.py -k "cast_once" \
  > "$X/gpu_tests.log" 2>&1
tail -4 "$X/gpu_tests.log"
PLAIN_OPS=linalg.matrix_rank PLAIN_GUARDED=1 PLAIN_TIMEOUT_S=170 PLAIN_UNTIL_S=180 \
  bash benchmarks/h200_session.sh plain > "$X/plain.log" 2>&1
tail -4 "$X/plain.log"
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
