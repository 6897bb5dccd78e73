#!/usr/bin/env bash
# One time-boxed H200 session: GPU tests and benchmarks, outputs under $OUT.
# Usage (device tool): bash benchmarks/h200_session.sh
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}; mkdir -p "$O"
log() { echo "== $(date -u +%T) $*"; }
log env; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"
log kernels; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py 2>&1 | tail -4
log verify_cost; timeout 75 python3 benchmarks/verify_cost.py --out "$O/verify_cost_h200.json" 2>&1 | tail -4
log regrad; timeout 60 python3 -m kernelaudit sweep --device cuda --ops mm,addmm,linear,sdpa,attention \
  --dtypes float32,float16 --directions bwd --thresholds 2^32 --out runs/h200-rerun --no-report 2>&1 | tail -12
tar czf "$O/h200_rerun.tgz" runs/h200-rerun 2>/dev/null
