"""The torch integrity checks tell torch's own wrapping of its functions (``torch.manual_seed``
at the first ``import torch._dynamo`` in a process, ``nn.Module.__init__`` at the first
``torch.compile`` call) from a replacement: the first is no tampering, and a look-alike
wrapper of the original still is."""

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


COMPILE_SCRIPT = """
import json, sys
import torch
assert "torch._dynamo" not in sys.modules, "the check needs a process where dynamo is not loaded yet"
from kernelaudit.zoo.oracles import integrity
before = integrity.snapshot()
torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))  # dynamo patches nn.Module.__init__
compiled = integrity.replaced(before, restore=False)
patched_by_torch = torch.nn.Module.__init__ is not before["torch.nn.Module.__init__"][2]
init = torch.nn.Module.__init__
def look_alike(self, *args, **kwargs):  # a candidate's closure over the original, outside torch
    init(self, *args, **kwargs)
torch.nn.Module.__init__ = look_alike
replaced = integrity.replaced(integrity.snapshot() | {"torch.nn.Module.__init__": (torch.nn.Module, "__init__", init)})
print(json.dumps({"compiled": compiled, "patched_by_torch": patched_by_torch, "replaced": replaced,
                  "restored": torch.nn.Module.__init__ is init}))
"""


def test_torch_compiles_own_module_init_patch_is_not_tampering_and_a_look_alike_closure_is():
    """The first ``torch.compile`` call replaces ``nn.Module.__init__`` and ``__setstate__``
    with closures of dynamo's (generation tagging): a candidate that compiles is not a
    candidate that patches torch. The same closure written outside torch still is."""
    proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"compiled": [], "patched_by_torch": True, "replaced": ["torch.nn.Module.__init__"], "restored": True}
