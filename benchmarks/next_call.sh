#!/usr/bin/env bash
# One device call for what issues 16 and 19 have left (as of the 2026-12-08 stop),
# fitted to the GPU it lands on and to the call's time limit: each step runs only if its
# longest time still fits before LIMIT_S (else it says so and is left out).
# Usage (device tool, carry [".kb", "runs/h200z"]):
#   . benchmarks/device_env.sh && bash benchmarks/next_call.sh LIMIT_S
# LIMIT_S: the call's limit in seconds (default 540); the sweep takes what the rest leaves.
# In order:
#   0. issue 19: benchmarks/repro_ops_survey.py, which ops keep their bits at every batch
#      size as torch runs them and under deterministic("ieee") (NEXT_SURVEY=0 leaves it
#      out; at most 100 s; $OUT/extra/ops_survey/); then issue 16's --mode sampled against
#      auto, side by side on four ops whose judge reruns them (benchmarks/sampled_ab.py,
#      NEXT_SAMPLED_AB=0 leaves it out; at most 120 s; $OUT/extra/sampled_ab.json);
#   1. on an H200 (more than 100 GB), what only an H200 can tell: issue 19's prefill row
#      against the warp-specialized tile (benchmarks/prefill_lanes_ab.py; NEXT_PREFILL=1 runs
#      it on an H100 too, where 2026-12-07 measured it; NEXT_PREFILL=0 leaves it out;
#      NEXT_PREFILL_MS picks the M values, default "4096 1024 8192"; 150 s each) and the act16
#      decode timing (NEXT_DECODE=0 leaves it out; 150 s);
#   2. the GPU bit tests of the table's prefill rows (NEXT_TESTS=1; they passed on an H100
#      on 2026-12-07; 170 s); the tile tables' other rows timed per shape (NEXT_TABLES=1:
#      h200_session.sh tables; TABLES picks runs, TABLES_TIMEOUT_S bounds each, 150 s by
#      default: every bf16 row was timed by 2026-12-08; left: TABLES=fp32w_decode with
#      TABLES_TIMEOUT_S=200 (M = 4 and 16), smallsmall_prefill_256 (N = 256));
#   3. issue 16, NEXT_PLAIN=1 (waiting at the 2026-12-08 stop: NEXT_PLAIN_OPS=linalg.pinv.singular,
#      about 100 s a run): the findings of NEXT_PLAIN_OPS as plain torch and again under
#      `kernelaudit run` (h200_session.sh plain, guarded), but those NEXT_PLAIN_DONE's results
#      settled; no snippet starts after a third of what is left;
#   4. issue 16: the full grid resumed (runs/h200z) until 60 s before LIMIT_S: on an H200 the
#      cases H100s skipped for memory (453 at the 2026-12-08 stop, each op's smallest first,
#      the ops in turns); the grown QR/LDL cases left at the 2026-12-08 stop (8 waiting,
#      24 to 126 s each, past the 20-s case timeout, so the 120-s slow pass or NEXT_SWEEP_ARGS
#      below; qr and linalg.qr backward at 2^31 elements and up need an H200's memory);
#      the other waiting cases (norm.nuc, linalg.cond about 130 s; mode, bernoulli,
#      cumulative_trapezoid, cummax/cummin.flat stop returning) need --slow-timeout 600.
# Outputs: $OUT/h200_results.tgz (each h200_session.sh step: plain/, tables/, the sweep's
# store for benchmarks/take_store.sh), $OUT/extra/prefill_ab_m<M>.json and .log,
# $OUT/extra/gpu_tests.log.
set -u
limit=${1:-540}
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
X=${OUT:-/tmp/out}/extra
mkdir -p "$X"

room() {  # room SECONDS NAME: whether a step that may take SECONDS ends 60 s before the limit
  if [ $((limit - SECONDS - 60)) -ge "$1" ]; then return 0; fi
  echo "next_call: $2 left out: $((limit - SECONDS - 60)) s left, it may take $1 s"; return 1
}

h200=0; [ "${mem:-0}" -gt 100000 ] && h200=1
if [ "${NEXT_SURVEY:-1}" = 1 ] && room 100 "ops survey"; then
  # issue 19: which ops keep their bits at every batch size, torch and ieee (about 60 s)
  timeout 100 python3 benchmarks/repro_ops_survey.py --device cuda --budget-s 70 --out "$X/ops_survey" \
    > "$X/ops_survey.log" 2>&1
  tail -3 "$X/ops_survey.log"
fi
if [ "${NEXT_SAMPLED_AB:-1}" = 1 ] && room 120 "sampled judge A/B"; then
  # issue 16: --mode sampled against auto on the ops whose judge reruns them (about 100 s)
  timeout 120 python3 benchmarks/sampled_ab.py --device cuda --budget-s 80 \
    --ops linalg.svdvals,norm.nuc,nn.functional.layer_norm,linalg.cond --axes bytes --sizes "2^31 B+" \
    --out "$X/sampled_ab.json" > "$X/sampled_ab.log" 2>&1
  tail -3 "$X/sampled_ab.log"
fi
prefill=${NEXT_PREFILL:-$h200}
if [ "$prefill" = 1 ]; then
  for m in ${NEXT_PREFILL_MS:-4096 1024 8192}; do
    room 150 "prefill A/B at M = $m" || continue
    timeout 150 python3 benchmarks/prefill_lanes_ab.py --m $m --variants ws,table --rounds 5 \
      --out "$X/prefill_ab_m$m.json" > "$X/prefill_ab_m$m.log" 2>&1
    tail -4 "$X/prefill_ab_m$m.log"
  done
fi
if [ "$h200" = 1 ] && [ "${NEXT_DECODE:-1}" = 1 ] && room 160 "act16 decode"; then
  GEMM_SECTIONS=decode GEMM_ARGS="--decode-ms 1,2,4,16" GEMM_TIMEOUT_S=150 GEMM_TESTS=0 \
    bash benchmarks/h200_session.sh gemm
fi
if [ "${NEXT_TESTS:-0}" = 1 ] && room 170 "GPU bit tests"; then
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_repro_ieee_tiled_gpu.py \
    -k "cast_once or compiled_lanes_linear or table_prefill_row" > "$X/gpu_tests.log" 2>&1
  tail -4 "$X/gpu_tests.log"
fi
if [ "${NEXT_TABLES:-0}" = 1 ]; then
  each=${TABLES_TIMEOUT_S:-150}
  fit="" n=0
  for t in ${TABLES:-smalln_decode smalln_prefill smallk_decode mma_rows smallsmall_decode}; do
    # the runs that fit one after another (h200_session.sh tables runs them in its own order)
    if room $(((n + 1) * each)) "tables $t"; then fit="$fit $t"; n=$((n + 1)); fi
  done
  [ -n "$fit" ] && TABLES="${fit# }" TABLES_TIMEOUT_S=$each bash benchmarks/h200_session.sh tables
fi
if [ "${NEXT_PLAIN:-0}" = 1 ] && room 120 "plain and guarded findings"; then
  R=benchmarks/results/2026-12-07-h100-svdvals-guarded-mma-rows-slow-pass
  PLAIN_OPS=${NEXT_PLAIN_OPS:-} PLAIN_GUARDED=1 PLAIN_TIMEOUT_S=100 \
    PLAIN_UNTIL_S=$(((limit - SECONDS) / 3)) \
    PLAIN_DONE=${NEXT_PLAIN_DONE-$R/plain/results.json $R/plain_call3/results.json} \
    bash benchmarks/h200_session.sh plain
fi
if [ "$h200" = 1 ]; then
  export SWEEP_ARGS="--memory-plan try"
fi
# NEXT_SWEEP_ARGS: more options for the sweep step, e.g. the grown QR/LDL cases alone with a
# longer slow pass: NEXT_SWEEP_ARGS="--ops qr,linalg.qr,linalg.ldl_factor,linalg.ldl_factor_ex
# --slow-timeout 300" (their 8 cases left: 24 to 126 s each, as their judged cases project).
export SWEEP_ARGS="${SWEEP_ARGS:-} ${NEXT_SWEEP_ARGS:-}"
left=$((limit - SECONDS - 60))
if [ "$left" -gt 60 ]; then
  SWEEP_UNTIL_S=$left REPORT=0 bash benchmarks/h200_session.sh sweep
else
  echo "next_call: ${left} s left for the sweep: not started"
fi
