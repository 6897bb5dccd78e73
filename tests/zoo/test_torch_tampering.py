"""The torch integrity check tells torch's own wrapping of ``torch.manual_seed`` (the first
``import torch._dynamo`` in a process) from a replacement: the first is no tampering, and a
look-alike wrapper (``functools.wraps`` of the original) still is."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import functools, json, sys
import torch
assert "torch._dynamo" not in sys.modules, "the check needs a process where dynamo is not loaded yet"
from kernelaudit.zoo.problems.loader import torch_snapshot, torch_tampering
before = torch_snapshot()
import torch._dynamo  # wraps torch.manual_seed in torch._disable_dynamo
dynamo = torch_tampering(before, restore=False)
orig = torch.manual_seed
@functools.wraps(orig)
def seed(s):
    return orig(0)  # a candidate's replacement that looks like a wrapper
torch.manual_seed = seed
replaced = torch_tampering(torch_snapshot() | {"torch.manual_seed": orig})
print(json.dumps({"dynamo": dynamo, "replaced": replaced, "restored": torch.manual_seed is orig}))
"""


def test_dynamo_wrapping_manual_seed_is_not_tampering_and_a_look_alike_is():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"dynamo": [], "replaced": ["torch.manual_seed"], "restored": True}
