#!/usr/bin/env bash
# One time-boxed H200 session: GPU tests and benchmarks of all three capabilities.
# Every output lands in $OUT/h200 and is packed into $OUT/h200_results.tgz.
# Usage (device tool): bash benchmarks/h200_session.sh
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}/h200; mkdir -p "$O"
log() { echo "== $(date -u +%T) $*"; }
log env; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"
log kernels; timeout 70 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py 2>&1 | tail -4
log verify_cost; timeout 70 python3 benchmarks/verify_cost.py --out "$O/verify_cost_h200.json" 2>&1 | tail -4
log rerun; timeout 45 python3 -m kernelaudit sweep --device cuda --ops mm,addmm,linear,sdpa,attention \
  --dtypes float32,float16 --directions bwd --thresholds 2^32 --out "$O/sweep_rerun" --no-report 2>&1 | tail -8
log guard_demo; timeout 70 python3 examples/guard_demo.py --device cuda --scale 32 --dtype bfloat16 \
  --out "$O/guard_demo_h200.json" --figure "$O/guard_demo_h200.png" 2>&1 | tail -6
log guard_overhead; timeout 40 python3 benchmarks/guard_overhead.py --device cuda --out "$O/guard_overhead_h200.json" 2>&1 | tail -4
log guard_fix; timeout 40 python3 benchmarks/guard_fix_throughput.py --device cuda --out "$O/guard_fix_h200.json" 2>&1 | tail -4
P=relu,softmax,layernorm,matmul_square,matmul_batched,attention,cumsum,cross_entropy_loss
log corpus; KERNELAUDIT_GPU_PROBLEMS=$P KERNELAUDIT_GPU_RESULTS="$O/corpus_h200.json" timeout 60 \
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_corpus_gpu.py 2>&1 | tail -6
log oracle_cost; timeout 40 python3 benchmarks/oracle_cost.py --device cuda --problems $P --repeats 3 "$O/oracle_cost_h200.json" 2>&1 | tail -4
log done
tar czf "${OUT:-/tmp/out}/h200_results.tgz" -C "${OUT:-/tmp/out}" h200 && rm -rf "$O"
