"""Guard coverage checked against the dispatch table torch ships.

For every op the guard claims to cover (docs/guard.md, "Coverage") and every backend
it gates (MPS, CUDA), ``native_functions.yaml`` (shipped under ``torchgen/packaged/``)
says which kernel the backend runs: its own (an explicit ``MPS:``/``CUDA:`` entry, or the
one its ``structured_delegate`` has) or a CompositeImplicitAutograd decomposition. A
backend kernel must be one of the guard's entry points on that backend; a
decomposition must reach only guarded matmul ops (traced on meta tensors, which take
the same decomposition). No Apple hardware needed.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from kernelaudit.guard.intercept import entry_points, linear_backward_decomposed, linear_decomposed
from kernelaudit.guard.policy import mps_policy

yaml = pytest.importorskip("yaml")
torchgen = pytest.importorskip("torchgen")
YAML = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")

#: What docs/guard.md's coverage table claims: user call -> the aten op it enters.
CLAIMED = {"torch.mm": "mm", "mm out=": "mm.out", "torch.bmm": "bmm", "bmm out=": "bmm.out", "torch.addmm": "addmm",
           "addmm out=": "addmm.out", "Tensor.addmm_": "addmm_", "torch.baddbmm": "baddbmm",
           "baddbmm out=": "baddbmm.out", "Tensor.baddbmm_": "baddbmm_", "torch.matmul": "matmul",
           "torch.einsum": "einsum", "F.linear": "linear", "F.linear backward": "linear_backward",
           "SDPA on MPS": "_scaled_dot_product_attention_math_for_mps"}
MATMUL_ATEN = {"mm", "bmm", "addmm", "baddbmm", "addmm_", "baddbmm_", "mm.out", "bmm.out", "addmm.out", "baddbmm.out",
               "linear", "linear_backward", "addbmm", "addmv", "mv", "dot", "matmul", "_addmm_activation"}


@pytest.fixture(scope="module")
def table() -> dict:
    if not os.path.exists(YAML):
        pytest.skip("this torch ships no native_functions.yaml")
    with open(YAML) as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {e["func"].split("(")[0]: e for e in entries}


def backend_kernel(table: dict, name: str, key: str) -> str | None:
    """The kernel ``key`` runs for ``aten::name``: its own (a name), ``None`` when it
    decomposes (CompositeImplicitAutograd) or has no kernel there."""
    e = table[name]
    for keys, kernel in (e.get("dispatch") or {}).items():
        if key in [k.strip() for k in keys.split(",")]:
            return kernel
    if e.get("structured_delegate"):
        return backend_kernel(table, e["structured_delegate"], key)
    return None


@pytest.mark.parametrize("device, key", [("mps", "MPS"), ("cuda", "CUDA")])
def test_every_backend_kernel_of_a_covered_op_is_an_entry_point_of_the_guard(table, device, key):
    policy = mps_policy().on(device)  # the full rule set, gated to this backend
    guarded = entry_points(policy, device, has_kernel=lambda n: backend_kernel(table, n, key) is not None)
    own, decomposed = {}, []
    for user, name in CLAIMED.items():
        kernel = backend_kernel(table, name, key)
        if kernel is None:
            decomposed.append(name)
        else:
            own[name] = kernel
            assert name in guarded, f"{user} runs {key} kernel {kernel} on {device}, which the guard does not intercept"
    # what the table says today (a change in torch shows up here first)
    assert own.get("linear") == ("_mps_linear" if device == "mps" else None)
    assert own.get("linear_backward") == ("mps_linear_backward" if device == "mps" else None)
    assert own["bmm"] == f"bmm_out_{device}" and own["addmm_"] == f"addmm_out_{device}"
    assert ("_scaled_dot_product_attention_math_for_mps" in own) == (device == "mps")
    assert {"matmul", "einsum"} <= set(decomposed)
    # and nothing is hooked that the backend does not have
    assert all(backend_kernel(table, n, key) for n in guarded)


class _Reached(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name().split("::")[1]
        self.ops.add(name if func._overloadname == "default" else f"{name}.{func._overloadname}")
        return func(*args, **(kwargs or {}))


def _calls():
    m = lambda *s: torch.empty(*s, device="meta", requires_grad=True)  # noqa: E731
    yield "matmul 3-D", lambda: torch.matmul(m(2, 3, 4), m(2, 4, 5))
    yield "matmul 4-D", lambda: torch.matmul(m(2, 2, 3, 4), m(2, 2, 4, 5))
    yield "matmul 3-D x 2-D", lambda: torch.matmul(m(2, 3, 4), m(4, 5))
    yield "einsum", lambda: torch.einsum("bij,bjk->bik", m(2, 3, 4), m(2, 4, 5))
    yield "linear 2-D", lambda: F.linear(m(3, 4), m(5, 4), m(5))
    yield "linear 3-D", lambda: F.linear(m(2, 3, 4), m(5, 4), m(5))
    yield "linear no bias", lambda: F.linear(m(2, 3, 4), m(5, 4))


@pytest.mark.parametrize("what, fn", list(_calls()), ids=[w for w, _ in _calls()])
def test_decomposed_ops_reach_only_guarded_matmul_kernels_on_cuda_forward_and_backward(table, what, fn):
    guarded = entry_points(mps_policy().on("cuda"), "cuda",
                           has_kernel=lambda n: backend_kernel(table, n, "CUDA") is not None)
    with _Reached() as rec:
        out = fn()
        out.sum().backward()
    matmuls = {n for n in rec.ops if n in MATMUL_ATEN}
    assert matmuls and matmuls <= guarded, f"{what} reaches {sorted(matmuls - guarded)} unguarded"


def test_the_mps_linear_interception_computes_linear_and_its_gradients():
    """What the guard runs on MPS for a linear past the floor: the matmul decomposition
    (whose mm/addmm/bmm meet the guard), equal to F.linear and its backward."""
    torch.manual_seed(0)
    for shape in ((6, 4), (2, 6, 4)):
        x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
        b = torch.randn(5, dtype=torch.float64, requires_grad=True)
        ref = F.linear(x, w, b)
        assert torch.allclose(linear_decomposed(x, w, b), ref) and torch.allclose(linear_decomposed(x, w), ref - b)
        g = torch.randn_like(ref)
        ref.backward(g)
        gi, gw, gb = linear_backward_decomposed(x.detach(), g, w.detach(), (True, True, True))
        assert torch.allclose(gi, x.grad) and torch.allclose(gw, w.grad) and torch.allclose(gb, b.grad)
        assert linear_backward_decomposed(x.detach(), g, w.detach(), (False, True, False))[0].numel() == 0


def test_every_aten_entry_of_a_shipped_rule_has_a_kernel_on_its_backend(table):
    # a rule screening an entry its backend decomposes (CompositeExplicitAutograd
    # `bernoulli`, say) would never be reached: its calls arrive at the kernel it calls
    from kernelaudit.guard.rules import known_faults

    from kernelaudit.guard.separable import AUTOGRAD_ENTRIES

    def reached(entry: str, key: str) -> bool:
        if entry in AUTOGRAD_ENTRIES:
            # screened at the autograd key: reached where the entry has an autograd kernel
            # of its own (VariableType's, registered at the Autograd alias), which an op
            # with a dispatch entry has and a CompositeImplicitAutograd one has not
            return bool(table[entry].get("dispatch")) and torch._C._dispatch_has_kernel_for_dispatch_key(
                f"aten::{entry}", torch._C.DispatchKey.Autograd)
        return backend_kernel(table, entry, key) is not None

    keys = {"cuda": "CUDA", "mps": "MPS", "cpu": "CPU"}
    unreached = [(r.name, entry) for r in known_faults() for entry in r.aten if not reached(entry, keys[r.device])]
    assert not unreached, f"rules whose entry points their backend never runs: {unreached}"
    assert backend_kernel(table, "bernoulli", "CUDA") is None          # what the check catches
