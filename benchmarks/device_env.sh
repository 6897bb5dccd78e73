#!/usr/bin/env bash
# Source at the start of a device call (the GPU machine has no network):
#   . benchmarks/device_env.sh && bash benchmarks/h200_session.sh STEPS
# Installs the wheels carried in .kb/wheels (libcst, pyyaml: built for the device's
# Python) into /tmp/site and puts them, .kb/pylib (expecttest) and src/ on PYTHONPATH.
# .kb is this checkout's ignored folder of carried inputs (KernelBench, wheels, pylib):
# pass "carry": [".kb", "runs/h200"] to the device tool. h200_session.sh packs $OUT/h200
# into $OUT/h200_results.tgz itself: append nothing that writes that file after it.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .kb/wheels/*.whl >/dev/null 2>&1 \
  || echo "device_env: no carried wheels installed (is .kb carried?)" >&2
export PYTHONPATH=/tmp/site:$PWD/.kb/pylib:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export OUT=${OUT:-/tmp/out} PYTHONUNBUFFERED=1
