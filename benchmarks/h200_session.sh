#!/usr/bin/env bash
# Time-boxed H200 steps: GPU tests and benchmarks of all three capabilities.
# Every output lands in $OUT/h200 and is packed into $OUT/h200_results.tgz, which removes
# $OUT/h200: commands of the same device call between two invocations write elsewhere under
# $OUT (a file written into $OUT/h200 then finds no folder and is lost).
# Usage (device tool): bash benchmarks/h200_session.sh STEP [STEP...]
# A sweep resumes runs/h200 when it exists (carry it between calls, or carry runs/h200z, packed by
# benchmarks/pack_store.sh, which is unpacked over runs/h200 first). After the call,
# `bash benchmarks/take_store.sh FILES_AT` takes the returned store (or its checkpoint) back into
# runs/h200 and packs it again.
# Resumable long steps (carry runs/ back and forth with the device tool's `carry`):
#   kernelbench (KernelBench L1-3 at their own shapes, KB_BUDGET_S/KB_LEVELS/KB_ONLY/KB_JOBS: 4 workers,
#   out-of-memory problems again alone),
#   f64paths (float64 reference forwards of L1 with cuDNN or with cuDNN off, the riskiest first: sets
#   KERNELAUDIT_FLOAT64_CUDNN; F64_BUDGET_S), kboracle (strongest vs the official checker on L1, the riskiest first (KBO_ORDER=number for KernelBench's order); KBO_KB_TRIALS, default 1: the large problems'
#   official checks timed on their first trial, an upper bound of each ratio), mutate (the 10k-mutant campaign,
#   MUTATE_BUDGET_S), quicksweep (issue 16's 3-minute --quick CUDA sweep), heads (sdpa.heads and
#   sdpa.flash on the attn_batch axis: the heads rule), gemm (issue 19: repro_gemm's decode,
#   prefill, bits and invariance sections (GEMM_SECTIONS;
#   GEMM_ARGS, e.g. "--decode-ms 2,4 --decode-kn 8192"), then the repro GPU tests (GEMM_TESTS=0
#   skips them; GEMM_TESTS_TIMEOUT_S, default 300; they took 198 s on 2026-12-05 before 12 tma cases)).
#   profile: sweep cases' phase times; PROFILE_CASES (op/dtype/direction list) and PROFILE_OPS (the
#   torch.profiler tables) override benchmarks/sweep_profile.py's defaults; PROFILE_JUDGED=1 runs
#   them judged (calibrated tolerances, the bit-equality pre-check), as a sweep does.
#   findings (issue 16: benchmarks/repro_cuda_findings.py's probes of the full grid's findings, one process each; FINDINGS overrides,
#   e.g. "bernoulli rrelu multinomial")
#   plain (issue 16: benchmarks/repro_store_findings.py, each finding of runs/h200 as plain torch against
#   the call in small chunks; PLAIN_OPS, PLAIN_TIMEOUT_S (150 a snippet), PLAIN_UNTIL_S (420: no snippet starts later),
#   PLAIN_GUARDED=1: each again under `kernelaudit run`, the shipped rules; PLAIN_PER_DTYPE=1: a case per dtype too; PLAIN_DONE: earlier runs' results.json(.gz), space-separated, their settled findings not run again)
#   tables (issue 19: benchmarks/repro_gemm.py on the tile tables' small-N, small-K and mma rows, $O/tables/; TABLES_TIMEOUT_S, 150 each;
#   TABLES picks runs, e.g. "smalln_decode"; TABLES_DECODE_MS the small-N decode M values, default 1,2,4,8,16;
#   smallsmall_decode: the sequential order's small-N decode rows, K = N = 512; smallk_prefill and
#   smallsmall_prefill: the sequential order's prefill rows, K = 512, N = 4096 and 512 (smallsmall_prefill_m:
#   the small row at M = 1024 and 8192; smallsmall_prefill_256: K = 512, N = 256; _768: K = N = 768); fp32w_decode and
#   fp32w_prefill: the fp32-weight order's rows (8 x 4 lanes), K = N = 4096 at M = 1, 4, 16 and 8192 at M = 4096)
#   gluonncu (issue 19: ncu of the Gluon prefill pass, 4 warps, and the warp-specialized table tile, with shared wavefronts and stall reasons; M = 4096, K = N = 8192)
#   ldsncu (issue 19: ncu of fma_issue_ab's _outer_lds, the pass's K step without producers, and the warp-specialized pass side by side)
#   castncu (issue 19: ncu of the cast-once pass, Tiles.cast_once, its cast and the warp-specialized pass side by side)
#   prefillab (issue 19: benchmarks/prefill_lanes_ab.py, the first pass's variants side by side; PREFILLAB_ARGS)
#   decodencu (issue 19: ncu of decode at M = 4, K = N = 8192: the table tile, a register-prefetch and an 8-warp TMA tile)
#   guardgrid (issue 16: the full grid's guard GPU tests: linspace/logspace, softmin, random draws,
#   unique_consecutive, norm rows, matrix_exp, pinv, pinverse and matrix_rank, mode; GUARDGRID_K overrides the -k selection, GUARDGRID_TIMEOUT_S 420)
#   steps: gputests (all of tests/gpu) oomsweep (float32 backward at 2*2^32: OOM retries) flatab (flat orders and tiles, interleaved rounds) flatncu kernels verify ncu profile guard sweep workers_ab repro corpus oracle_cost demo
#   (default: all but sweep, workers_ab, repro)
# workers_ab: the same sub-grid swept once per AB_CONFIGS entry (workers:calibration
# workers, default "1:4 2:8"; AB_OPS, AB_THRESHOLDS, AB_AXES pick the sub-grid), each with a fresh store and Triton cache; then
# benchmarks/sweep_phases.py compares calibration and case phases.
# SWEEP_BUDGET_S (default 540) bounds the sweep step; SWEEP_UNTIL_S instead ends it that many
# seconds after the script started (after other steps; commands run before the script in the same
# device call count against the device's limit, not this clock); it resumes a store in runs/h200.
# Leave 60 s of the call's limit after SWEEP_UNTIL_S: the sweep may take 20 s more to stop (its
# kill grace), then its phases, the store's copy and the tarball follow (an H100 call of 590 s
# with SWEEP_UNTIL_S=540 was cut at its limit just after the tarball, 2026-12-06).
# While it runs, $OUT/h200/sweep_checkpoint.jsonl.gz holds the verdicts of a minute ago.
# SWEEP_ARGS: more sweep options (e.g. --rerun wrong). SWEEP_PRESET (default --full: every op, 27,954 cases; --deep: the hand ops of the 2026-12-04 run of record).
# REPORT=0 skips building the report there (kernelaudit report rebuilds it anywhere).
# KERNELAUDIT_OVERLAP_CALIBRATION=1 (the environment) starts cases while calibration runs.
set -u
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# The OpInfo catalogue for the device's torch, derived once (about a minute) and kept in runs/
# (carry runs/ between calls); copied to $OUT to ship as a snapshot under sweep/ops/data/.
export KERNELAUDIT_CACHE_DIR=${KERNELAUDIT_CACHE_DIR:-$PWD/runs/cache}
# KernelBench as carried (.kb/KernelBench): the zoo GPU tests read it from here, not ../shared
export KERNELAUDIT_KERNELBENCH=${KERNELAUDIT_KERNELBENCH:-$PWD/.kb/KernelBench}
O=${OUT:-/tmp/out}/h200; mkdir -p "$O"
# A second invocation in the same call would pack only its own outputs over the first one's
# h200_results.tgz (and remove them): unpack an earlier pack first, so the last pack holds all.
[ -f "${OUT:-/tmp/out}/h200_results.tgz" ] && tar xzf "${OUT:-/tmp/out}/h200_results.tgz" -C "${OUT:-/tmp/out}"
log() { echo "== $(date -u +%T) $*"; }
# ncu's shared-memory and FMA-pipe metrics of the prefill passes (gluonncu, ldsncu)
NCU_SHARED=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
# ncu_pass FILE KERNEL_REGEX PYTHON: ncu's sections, the shared and FMA-pipe metrics and the
# instruction counts of the kernels matching KERNEL_REGEX in the PYTHON snippet; prints the lines read
ncu_pass() {
  timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
    --metrics $NCU_SHARED,smsp__inst_executed.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum \
    -k "regex:$2" python3 -c "$3" > "$1" 2>&1
  grep -E '^  [a-z_]+|Duration|SM Frequency|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Stall|bank_conflicts|wavefronts|pipe_fma|inst_executed|Issue Slots Busy|Executed Ipc|No Eligible|Eligible Warps|Active Warps Per Scheduler' "$1" | tail -90
}
# ncu_stalls FILE KERNEL_REGEX PYTHON: each stall reason's cycles a warp spends per instruction
# it issues, for the kernels matching KERNEL_REGEX in the PYTHON snippet (a run of its own: a
# metric name this ncu lacks fails only it); prints those above 0.05
ncu_stalls() {
  timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -k "regex:$2" \
    python3 -c "$3" > "$1" 2>&1
  grep -E '^  [a-z_]+|stalled' "$1" | awk '/^  [a-z_]/{print; next} $3+0 > 0.05' | head -60
}
# The sweep store carried compressed (benchmarks/pack_store.sh writes runs/h200z: the store with
# the rest of the tree passes the device's 64 MiB cap): unpacked over runs/h200, which it replaces,
# unless the runs/h200 a warm machine kept holds more records (a pack not made again since the
# last call's store came back: unpacking it would drop that call's records).
if [ -f runs/h200z/verdicts.jsonl.gz ]; then
  packed=$(gunzip -c runs/h200z/verdicts.jsonl.gz | wc -l)
  here=$( [ -f runs/h200/verdicts.jsonl ] && wc -l < runs/h200/verdicts.jsonl || echo 0)
  if [ "$here" -gt "$packed" ]; then
    log "store kept: runs/h200 has $here records, the pack $packed (run benchmarks/pack_store.sh before a call)"
  else
    rm -rf runs/h200 && mkdir -p runs/h200 && cp runs/h200z/*.json runs/h200/ \
      && gunzip -c runs/h200z/verdicts.jsonl.gz > runs/h200/verdicts.jsonl && log "store unpacked: $packed records"
  fi
fi
steps=${*:-kernels verify profile guard demo corpus oracle_cost}
log env; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/env.txt"
python3 -c "import torch,triton,platform;print(torch.__version__,triton.__version__,torch.version.cuda,platform.python_version())" | tee -a "$O/env.txt"
for s in $steps; do
  case $s in
  kernels) log kernels; timeout ${KERNELS_TIMEOUT_S:-240} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py ${KERNELS_K:+-k "$KERNELS_K"} > "$O/kernels_tests.log" 2>&1; tail -15 "$O/kernels_tests.log" ;;
  gputests) log gpu_tests; timeout ${GPUTESTS_TIMEOUT_S:-400} python3 -m pytest -q -p no:cacheprovider tests/gpu > "$O/gpu_tests.log" 2>&1; tail -15 "$O/gpu_tests.log" ;;
  flatab) log flat_ab; timeout ${FLATAB_TIMEOUT_S:-200} python3 benchmarks/flat_ab.py --out "$O/flat_ab_${AB_DTYPE:-bfloat16}.json" \
      --dtype ${AB_DTYPE:-bfloat16} --rounds ${AB_ROUNDS:-7} ${AB_FLAT_CONFIGS:+--configs $AB_FLAT_CONFIGS} > "$O/flat_ab.log" 2>&1
    grep -v '^ \|^{\|^}' "$O/flat_ab.log" | tail -40 ;;
  flatncu) log flat_ncu; timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section InstructionStats --metrics smsp__inst_executed.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active \
      -k regex:_flat_kernel python3 benchmarks/flat_ab.py --rounds 0 --out /tmp/x.json --configs ${NCU_FLAT_CONFIGS:-seq:4-1-4-1024,step:8-1-4-1024} > "$O/flat_ncu.txt" 2>&1
    grep -E '^  _[a-z_]+|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|inst_executed|pipe_|Issue Slots Busy|Stall' "$O/flat_ncu.txt" | tail -60 ;;
  verify) log verify_cost; timeout ${VERIFY_TIMEOUT_S:-240} python3 benchmarks/experimental/verify_cost.py ${EXPLORE:+--explore} ${FLAT_TILES:+--flat-tiles} --dtypes ${VERIFY_DTYPES:-bfloat16,float16,float32} --out "$O/verify_cost_h200.json" > "$O/verify_cost.log" 2>&1; tail -8 "$O/verify_cost.log" ;;
  ncu) log ncu; timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
      --metrics smsp__inst_executed.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active \
      -k 'regex:_hash_kernel|_gen_project_kernel|_lhs_kernel|_split_kernel|_freivalds_body' \
      python3 benchmarks/experimental/verify_cost.py --ncu --dtypes ${NCU_DTYPES:-bfloat16} --out /tmp/ncu.json > "$O/ncu.txt" 2>&1
    grep -E '^  _[a-z_]+|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|inst_executed|pipe_' "$O/ncu.txt" | tail -150 ;;
  profile) log profile; timeout ${PROFILE_TIMEOUT_S:-200} python3 benchmarks/sweep_profile.py --out "$O/sweep_profile_h200.json" \
      ${PROFILE_CASES:+--cases $PROFILE_CASES} ${PROFILE_OPS:+--profile $PROFILE_OPS} ${PROFILE_JUDGED:+--judged} \
      > "$O/sweep_profile.log" 2>&1
    grep '^{' "$O/sweep_profile.log" | python3 -c "
import sys,json
for l in sys.stdin:
    r=json.loads(l); print(r['case'], 'B=%d'%r['batch'], 'cold %.3f warm %.3f'%(r['cold_s'],r['warm_s']), r['warm'])" ;;
  guard) log guard_gpu_tests; timeout ${GUARD_TESTS_TIMEOUT_S:-300} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_guard_gpu.py \
      tests/gpu/test_guard_known_faults_gpu.py tests/gpu/test_guard_opinfo_faults_gpu.py --durations=8 2>&1 | tail -14
    log guard_overhead; timeout ${GUARD_TIMEOUT_S:-100} python3 benchmarks/guard_overhead.py --device cuda --rounds 9 --out "$O/guard_overhead_h200.json" 2>&1 | tail -8
    log guard_fix; timeout ${GUARD_TIMEOUT_S:-100} python3 benchmarks/guard_fix_throughput.py --device cuda --out "$O/guard_fix_h200.json" 2>&1 | tail -8 ;;
  guardgrid) log guard_full_grid_tests; timeout ${GUARDGRID_TIMEOUT_S:-420} python3 -m pytest -q -p no:cacheprovider \
      tests/gpu/test_guard_full_grid_faults_gpu.py \
      -k "${GUARDGRID_K:-rrelu or bernoulli or unique_consecutive or norm_backward or matrix_exp or softmin or linspace or pinv or matrix_rank or mode_past}" \
      --durations=8 > "$O/guard_full_grid_tests.log" 2>&1; tail -14 "$O/guard_full_grid_tests.log" ;;
  demo) log guard_demo; timeout 90 python3 examples/guard_demo.py --device cuda --scale 32 --dtype bfloat16 \
      --out "$O/guard_demo_h200.json" --figure "$O/guard_demo_h200.png" 2>&1 | tail -6 ;;
  sweep) log sweep; mkdir -p runs
    budget=${SWEEP_BUDGET_S:-540}; [ -n "${SWEEP_UNTIL_S:-}" ] && budget=$((SWEEP_UNTIL_S - SECONDS))
    # a checkpoint of the store's verdicts every 60 s, $O/sweep_checkpoint.jsonl.gz (2 MB): if the
    # device call is killed at its limit before the tarball below, this file still comes back
    # (gunzip it over runs/h200/verdicts.jsonl where it holds more lines)
    ( while sleep 60; do [ -f runs/h200/verdicts.jsonl ] && gzip -1c runs/h200/verdicts.jsonl > "$O/.ckpt.gz" \
        && mv "$O/.ckpt.gz" "$O/sweep_checkpoint.jsonl.gz"; done ) & ckpt=$!
    timeout -k 20 --signal=INT "$budget" python3 -m kernelaudit sweep --device cuda ${SWEEP_PRESET:---full} --resume \
      --out runs/h200 ${SWEEP_CASE_TIMEOUT_S:+--case-timeout $SWEEP_CASE_TIMEOUT_S} ${SWEEP_ARGS:-} --no-report > "$O/sweep.log" 2>&1; echo "sweep rc=$?"; tail -5 "$O/sweep.log"
    kill $ckpt 2>/dev/null; wait $ckpt 2>/dev/null; rm -f "$O/sweep_checkpoint.jsonl.gz" "$O/.ckpt.gz"   # the whole store follows
    timeout 30 python3 benchmarks/sweep_phases.py runs/h200 --json "$O/sweep_phases.json"
    # compiled Triton kernels, per kernel name (each distinct specialisation is one compile)
    find "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" -name '*.json' ! -name '__grp__*' 2>/dev/null \
      | sed 's|.*/||; s|\.json$||' | sort | uniq -c | sort -rn | head -20
    [ "${REPORT:-1}" = 1 ] && { timeout ${REPORT_TIMEOUT_S:-600} python3 -m kernelaudit report runs/h200 > "$O/report.txt" 2>&1; tail -30 "$O/report.txt"; }
    cp -r runs/h200 "$O/sweep_store" ;;
  oomsweep) log oom_sweep; rm -rf runs/oom  # the float32 backward cases that ran out of memory in session 8's full sweep
    timeout -k 20 --signal=INT ${OOM_TIMEOUT_S:-240} python3 -m kernelaudit sweep --device cuda --ops ${OOM_OPS:-mm,addmm,bmm,linear,matmul3d} \
      --dtypes ${OOM_DTYPES:-float32} --thresholds 2*2^32 --positions ${OOM_POSITIONS:-at,above} --directions ${OOM_DIRECTIONS:-bwd} --out runs/oom --case-timeout 120 --no-report > "$O/oom_sweep.log" 2>&1
    echo "oom sweep rc=$?"; tail -4 "$O/oom_sweep.log"
    python3 - runs/oom/verdicts.jsonl <<'PY' | tee "$O/oom_sweep_summary.txt"
import collections, json, sys
c = collections.Counter()
for line in open(sys.argv[1]):
    v = json.loads(line)["verdict"]
    c[(v["status"], "oom_retry" in v.get("details", {}))] += 1
print({f"{s}{' after an OOM retry' if r else ''}": n for (s, r), n in sorted(c.items())})
PY
    ;;
  workers_ab) log workers_ab; mkdir -p runs  # one grid, fresh store and Triton cache per config
    for cfg in ${AB_CONFIGS:-1:4 2:8}; do w=${cfg%%:*}; cw=${cfg##*:}; d=runs/ab_w${w}_c${cw}; rm -rf "$d"
      TRITON_CACHE_DIR=/tmp/triton_ab_${w}_${cw} timeout -k 20 --signal=INT ${AB_TIMEOUT_S:-170} python3 -m kernelaudit sweep \
        --device cuda --ops ${AB_OPS:-bmm,matmul4d,linear,add,softmax,cat,sum,sdpa} --thresholds ${AB_THRESHOLDS:-2^32} ${AB_AXES:+--axes $AB_AXES} \
        --dtypes float32,float16,bfloat16,int32,int64 --workers $w --calibration-workers $cw --out "$d" \
        --case-timeout 120 --no-report > "$O/ab_w${w}_c${cw}.log" 2>&1; echo "w=$w c=$cw rc=$?"; cp -r "$d" "$O/"
    done
    python3 benchmarks/sweep_phases.py runs/ab_* --json "$O/workers_ab.json" ;;
  findings) log findings; mkdir -p "$O/findings"  # the full grid's new findings, one process each
    for f in ${FINDINGS:-softmin_bwd geometric linspace logspace op:adaptive_avg_pool2d op:adaptive_avg_pool3d_bwd op:adaptive_max_pool1d op:adaptive_max_pool2d_bwd op:adaptive_max_pool3d_bwd op:avg_pool1d_bwd}; do
      timeout ${FINDING_TIMEOUT_S:-90} python3 benchmarks/repro_cuda_findings.py --only "$f" --out "$O/findings/${f//:/_}.json" > "$O/findings/${f//:/_}.log" 2>&1
      echo "$f rc=$? $(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print({k:v for k,v in d.items() if k in ('spaced','ops','softmin_bwd','geometric','draws','norm_rows','batched_svd')})" "$O/findings/${f//:/_}.json" 2>/dev/null | cut -c1-400)"
    done ;;
  plain) log plain_findings  # every finding of runs/h200 run again as plain torch, one process each
    python3 benchmarks/repro_store_findings.py runs/h200 --out "$O/plain" ${PLAIN_OPS:+--ops $PLAIN_OPS} \
      --timeout ${PLAIN_TIMEOUT_S:-150} --until ${PLAIN_UNTIL_S:-420} ${PLAIN_GUARDED:+--guarded} \
      ${PLAIN_PER_DTYPE:+--per-dtype} $(for d in ${PLAIN_DONE:-}; do printf -- '--done %s ' "$d"; done) 2>&1 | tail -80 ;;
  repro) log repro; timeout 120 python3 benchmarks/repro_cuda_findings.py --out "$O/repro_cuda_findings.json" 2>&1 | tail -40 ;;
  corpus) log corpus; KERNELAUDIT_GPU_RESULTS="$O/corpus_h200.json" timeout ${CORPUS_TIMEOUT_S:-220} \
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_corpus_gpu.py 2>&1 | tail -8 ;;
  oracle_cost) log oracle_cost; timeout ${ORACLE_TIMEOUT_S:-200} python3 benchmarks/oracle_cost.py --device cuda --repeats 3 \
      ${ORACLE_PROBLEMS:+--problems $ORACLE_PROBLEMS} "$O/oracle_cost_h200.json" 2>&1 | tail -6 ;;
  kernelbench) log kernelbench_own_shapes; mkdir -p runs  # resumable: carry runs/kb-h200 between calls
    timeout -k 20 "${KB_BUDGET_S:-540}" python3 benchmarks/kernelbench_false_rejections.py --device cuda --full \
      --levels "${KB_LEVELS:-1,2,3}" ${KB_ONLY:+--only $KB_ONLY} --jobs "${KB_JOBS:-4}" --timeout "${KB_TIMEOUT_S:-240}" \
      --kernelbench "${KB_ROOT:-.kb/KernelBench}" --out runs/kb-h200 > "$O/kernelbench.log" 2>&1; echo "kernelbench rc=$?"
    tail -5 "$O/kernelbench.log"; cp -r runs/kb-h200 "$O/" ;;
  kboracle) log oracle_cost_kernelbench; mkdir -p runs  # strongest vs the official checker, level 1 own shapes
    timeout -k 20 "${KBO_BUDGET_S:-540}" python3 benchmarks/oracle_cost_kernelbench.py --device cuda --resume \
      --root "${KB_ROOT:-.kb/KernelBench}" --out runs/oracle_cost_kb_h200.json ${KBO_PROBLEMS:+--problems $KBO_PROBLEMS} \
      --kb-jobs "${KBO_KB_JOBS:-8}" --kb-trials "${KBO_KB_TRIALS:-1}" --repeats "${KBO_REPEATS:-3}" --order "${KBO_ORDER:-risk}" \
      > "$O/oracle_cost_kb.log" 2>&1; echo "kboracle rc=$?"; tail -8 "$O/oracle_cost_kb.log"; cp runs/oracle_cost_kb_h200.json "$O/" ;;
  f64paths) log float64_conv_paths  # issue 15: float64 reference evaluations with cuDNN or im2col + DGEMM
    timeout -k 20 "${F64_BUDGET_S:-300}" python3 benchmarks/float64_conv_paths.py --root "${KB_ROOT:-.kb/KernelBench}" \
      --out "$O/float64_conv_paths.json" --budget-s $(( ${F64_BUDGET_S:-300} - 40 )) > "$O/float64_conv_paths.log" 2>&1
    echo "f64paths rc=$?"; tail -12 "$O/float64_conv_paths.log" | cut -c1-220 ;;
  mutate) log mutate_campaign; mkdir -p runs  # resumable: carry runs/$MUTATE_OUT between calls
    M="${MUTATE_OUT:-mutate-h200-l123}"
    timeout -k 20 --signal=INT "${MUTATE_BUDGET_S:-540}" python3 benchmarks/mutate_campaign.py \
      --subjects "${MUTATE_SUBJECTS:-corpus,kb,kb3}" --device cuda --jobs "${MUTATE_JOBS:-12}" \
      --kernelbench "${KB_ROOT:-.kb/KernelBench}" --out "runs/$M" --resume > "$O/mutate.log" 2>&1
    echo "mutate rc=$?"; tail -8 "$O/mutate.log"; cp -r "runs/$M" "$O/" ;;
  heads) log sdpa_heads; rm -rf runs/heads-h200  # issue 16: flash attention's heads limit, as a sweep finding
    timeout 240 python3 -m kernelaudit sweep --device cuda --ops sdpa.heads,sdpa.flash --axes attn_batch \
      --dtypes float16,bfloat16 --out runs/heads-h200 --case-timeout 60 > "$O/heads_sweep.log" 2>&1
    tail -8 "$O/heads_sweep.log"; cp -r runs/heads-h200 "$O/" ;;
  gemm) log repro_gemm; timeout ${GEMM_TIMEOUT_S:-500} python3 benchmarks/repro_gemm.py --out "$O/repro" \
      --sections ${GEMM_SECTIONS:-ceilings,decode,prefill,bits,invariance} ${GEMM_ARGS:-} > "$O/repro_gemm.log" 2>&1
    tail -20 "$O/repro_gemm.log"
    if [ "${GEMM_TESTS:-1}" = 1 ]; then timeout ${GEMM_TESTS_TIMEOUT_S:-300} python3 -m pytest -q -p no:cacheprovider \
      tests/gpu/test_repro_ieee_tiled_gpu.py tests/gpu/test_repro_gpu.py > "$O/repro_gpu_tests.log" 2>&1
      tail -5 "$O/repro_gpu_tests.log"; fi ;;
  tables) log repro_tables  # issue 19: the tile tables' rows other than the large ones, timed per shape
    for spec in "smalln_decode:--sections decode --decode-kn 4096 --n 512 --decode-ms ${TABLES_DECODE_MS:-1,2,4,8,16}" \
                "smalln_prefill:--sections prefill --prefill-ms 4096 --n 512" \
                "smallk_decode:--sections decode --decode-kn 512 --n 4096" "mma_rows:--sections mma_rows" \
                "smallsmall_decode:--sections decode --decode-kn 512 --n 512" \
                "smallk_prefill:--sections prefill --prefill-ms 4096 --prefill-k 512 --n 4096" \
                "smallsmall_prefill:--sections prefill --prefill-ms 4096 --prefill-k 512 --n 512" \
                "smallsmall_prefill_m:--sections prefill --prefill-ms 1024,8192 --prefill-k 512 --n 512" \
                "smallsmall_prefill_256:--sections prefill --prefill-ms 1024,4096,8192 --prefill-k 512 --n 256" \
                "smallsmall_prefill_768:--sections prefill --prefill-ms 1024,4096,8192 --prefill-k 768 --n 768" \
                "fp32w_decode:--sections decode --decode-kn 4096 --decode-ms 1,4,16 --weight-dtype float32" \
                "fp32w_prefill:--sections prefill --prefill-ms 4096 --weight-dtype float32"; do
      name=${spec%%:*}
      case " ${TABLES:-smalln_decode smalln_prefill smallk_decode mma_rows smallsmall_decode} " in *" $name "*) ;; *) continue ;; esac
      timeout ${TABLES_TIMEOUT_S:-150} python3 benchmarks/repro_gemm.py --out "$O/tables/$name" ${spec#*:} \
        > "$O/tables_$name.log" 2>&1; echo "tables $name rc=$?"; grep -E "^mma .*table|'table_order'" "$O/tables_$name.log" | cut -c1-300 | tail -6
    done ;;
  gluonncu) log gluon_ncu  # issue 19: why the Gluon prefill pass stops at 63% of the FMA ceiling (stalls, bank conflicts)
    # the two prefill first passes at M = 4096: the plain 4-warp pass, then the warp-specialized tile
    passes="
import torch
from kernelaudit.repro import gemm
from kernelaudit.repro.tiles import Tiles
x = torch.randn(4096, 8192, device='cuda', dtype=torch.bfloat16); w = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
for t in (Tiles(128, 128, 16, 4, 1, group_m=8, split_lanes=True, gluon=True),       # the plain pass
          Tiles(256, 128, 16, 8, 3, group_m=8, split_lanes=True, gluon=True, loader_warps=4)):   # warp-specialized
    gemm.linear(x, w, tiles=t)
torch.cuda.synchronize()"
    timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section InstructionStats --section MemoryWorkloadAnalysis_Tables \
      --metrics $NCU_SHARED \
      -k regex:^lane_sums python3 -c "$passes" > "$O/gluon_ncu.txt" 2>&1
    grep -E '^  [a-z_]+|Duration|SM Frequency|Shared|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|bank_conflicts|wavefronts|pipe_fma|Issue Slots Busy|Executed Ipc' "$O/gluon_ncu.txt" | tail -80
    # where the issue slots go: the warp-specialized tile's stall reasons
    ncu_stalls "$O/gluon_ncu_stalls.txt" '^lane_sums_ws' "$passes" ;;
  ldsncu) log lds_ncu  # issue 19: the pass's K step alone (no producers) against the warp-specialized pass
    # both at 8 FMA warps, 256 x 128 tiles, 4 x 4 thread tiles: what the feeding adds to each
    # FMA warp's issue (stall reasons a warp issue, pipe use, shared wavefronts)
    lds="
import sys, torch; sys.path.insert(0, 'benchmarks')
import fma_issue_ab as f
from kernelaudit.repro import gemm
sms = torch.cuda.get_device_properties(0).multi_processor_count
a = torch.rand(256 * 16, device='cuda'); b = torch.rand(128 * 16, device='cuda')
o = torch.empty(sms * 256 * 128, device='cuda')
f._outer_lds[(sms,)](a, b, o, ITERS=512, BM=256, BN=128, BK=16, TR=4, TC=4, SYNC=False, num_warps=8)
x = torch.randn(4096, 8192, device='cuda', dtype=torch.bfloat16); w = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
gemm.linear(x, w, order='ieee', tiles=f.pass_tiles((4, 4)))
torch.cuda.synchronize()"
    ncu_pass "$O/lds_ncu.txt" '^(_outer_lds|lane_sums_ws)' "$lds"
    ncu_stalls "$O/lds_ncu_stalls.txt" '^(_outer_lds|lane_sums_ws)' "$lds" ;;
  castncu) log cast_ncu  # issue 19: the cast-once pass (TMA-fed) against the warp-specialized pass, and its cast
    cast="
import sys, torch; sys.path.insert(0, 'benchmarks')
import prefill_lanes_ab as p
from kernelaudit.repro import gemm
x = torch.randn(4096, 8192, device='cuda', dtype=torch.bfloat16); w = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
for v in ('ws', 'cast_s4'):
    gemm.linear(x, w, order='ieee', tiles=p.VARIANTS[v])
torch.cuda.synchronize()"
    ncu_pass "$O/cast_ncu.txt" '^(lane_sums_ws|lane_sums_tma|_lane_major)' "$cast"
    ncu_stalls "$O/cast_ncu_stalls.txt" '^(lane_sums_ws|lane_sums_tma)' "$cast" ;;
  prefillab) log prefill_lanes_ab  # issue 19: the prefill first pass's variants side by side
    timeout ${PREFILLAB_TIMEOUT_S:-240} python3 benchmarks/prefill_lanes_ab.py --out "$O/prefill_lanes_ab.json" \
      ${PREFILLAB_ARGS:-} 2>&1 | tail -12 ;;
  decodencu) log decode_ncu  # issue 19: what holds decode at M = 4 (shared wavefronts: act16 against the fp32 stages)
    timeout ${NCU_TIMEOUT_S:-240} ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section InstructionStats --section MemoryWorkloadAnalysis_Tables --section SchedulerStats \
      --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,dram__bytes_read.sum.per_second \
      -k regex:ieee_lanes_kernel python3 -c "
import torch
from kernelaudit.repro import gemm
from kernelaudit.repro.tiles import Tiles, pick
x = torch.randn(4, 8192, device='cuda', dtype=torch.bfloat16); w = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
for t in (pick('ieee', 8192, 8192, torch.bfloat16, m=4),                     # the table tile (TMA, act16 since 2026-12-06)
          Tiles(4, 32, 128, 4, 4, tiled=True, tma=True),                     # the table's fp32-stage tile before it
          Tiles(4, 64, 128, 4, 1, tiled=True, prefetch=True)):               # register prefetch, 64 columns
    gemm.linear(x, w, tiles=t)
torch.cuda.synchronize()" > "$O/decode_ncu.txt" 2>&1
    grep -E '^  [a-z_]+|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Block Limit|Stall|bank_conflicts|pipe_fma|bytes_read|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps' "$O/decode_ncu.txt" | tail -90 ;;
  quicksweep) log quick_sweep; rm -rf runs/quick-h200  # issue 16: every family within 3 minutes
    /usr/bin/time -f "quick sweep wall %e s" timeout 300 python3 -m kernelaudit sweep --device cuda --quick ${QUICK_SWEEP_OPS:+--ops "$QUICK_SWEEP_OPS"} \
      --out runs/quick-h200 ${QUICK_CASE_TIMEOUT_S:+--case-timeout $QUICK_CASE_TIMEOUT_S} > "$O/quick_sweep.log" 2>&1; tail -8 "$O/quick_sweep.log"
    cp -r runs/quick-h200 "$O/" ;;
  *) echo "unknown step $s" ;;
  esac
done
mkdir -p "$O/cache"; cp "$KERNELAUDIT_CACHE_DIR"/*.json "$O/cache/" 2>/dev/null
log done
tar czf "${OUT:-/tmp/out}/h200_results.tgz" -C "${OUT:-/tmp/out}" h200 && rm -rf "$O"
