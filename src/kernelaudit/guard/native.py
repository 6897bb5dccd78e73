"""The guard's native fast path: the size screen in C++, Python only past the floor.

A Python ``torch.library`` kernel costs about 2 us per call just to enter Python, which
is a few percent of a small training step when every matmul is intercepted. This
module compiles (once, with ``torch.utils.cpp_extension.load_inline``; cached
afterwards) a boxed C++ kernel per overridden op that:

* counts the call (one relaxed atomic increment);
* reads ``numel()`` of the two matrix operands and the output size, and, below the
  policy's floor, calls the original kernel it captured before overriding it
  (``OperatorHandle::getComputedKernelForDispatchKey``);
* otherwise redispatches the same stack to a ``kernelaudit_guard::<op>`` custom op
  whose kernel (Python) is the engine's slow path (rules, then fix / raise / verify /
  warn).

``KERNELAUDIT_GUARD_NATIVE``: ``auto`` (default: use it when it builds, else the Python
overrides), ``0`` (never), ``1`` (require it).
"""

from __future__ import annotations

import logging
import threading

import torch

from ..config import GUARD_NATIVE

log = logging.getLogger("kernelaudit.guard")

ENV_NATIVE = GUARD_NATIVE.name
#: Namespace of the slow-path custom ops.
SLOW_NS = "kernelaudit_guard"
#: Positions of the two matrix operands in each op's arguments.
OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}

SOURCE = r"""
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <atomic>
#include <memory>
#include <vector>

namespace {
std::atomic<int64_t> g_inspected{0};

// One overridden op on one dispatch key: screen sizes, then the original kernel or the
// Python slow path.
struct Guarded final : c10::OperatorKernel {
  Guarded(c10::SafeKernelFunction o, c10::OperatorHandle s, c10::DispatchKey k, int ai, int bi, int n, int64_t f)
      : orig(std::move(o)), slow(std::move(s)), key(k), a_idx(ai), b_idx(bi), nargs(n), floor(f) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    g_inspected.fetch_add(1, std::memory_order_relaxed);
    auto base = stack->size() - nargs;
    const auto& a = (*stack)[base + a_idx].toTensor();
    const auto& b = (*stack)[base + b_idx].toTensor();
    int64_t na = a.numel(), nb = b.numel(), k = a.size(-1);
    int64_t out = k ? na / k * b.size(-1) : 0;  // output elements: a.numel() / K * N
    if (na < floor && nb < floor && out < floor) {
      orig.callBoxed(op, ks, stack);
      return;
    }
    slow.redispatchBoxed(c10::DispatchKeySet(key), stack);
  }
  c10::SafeKernelFunction orig;
  c10::OperatorHandle slow;
  c10::DispatchKey key;
  int a_idx, b_idx, nargs;
  int64_t floor;
};

std::vector<std::unique_ptr<torch::Library>> g_libs;
}  // namespace

void register_op(const std::string& name, const std::string& overload, const std::string& key, int64_t floor,
                 int64_t a_idx, int64_t b_idx, const std::string& slow_ns) {
  auto dk = c10::parseDispatchKey(key);
  auto& d = c10::Dispatcher::singleton();
  auto op = d.findSchemaOrThrow(("aten::" + name).c_str(), overload.c_str());
  auto orig = op.getComputedKernelForDispatchKey(dk);
  auto slow = d.findSchemaOrThrow((slow_ns + "::" + name).c_str(), overload.c_str());
  int n = static_cast<int>(op.schema().arguments().size());
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", dk, __FILE__, __LINE__);
  std::string full = overload.empty() ? name : name + "." + overload;
  lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunctor(
      std::make_unique<Guarded>(orig, slow, dk, (int)a_idx, (int)b_idx, n, floor)));
  g_libs.push_back(std::move(lib));
}

void unregister_all() { g_libs.clear(); }
int64_t inspected() { return g_inspected.load(); }
void reset_inspected() { g_inspected.store(0); }
"""

_LOCK = threading.Lock()
_MODULE = None
_TRIED = False
_DEF_LIB = None


def _mode() -> str:
    m = GUARD_NATIVE.raw().strip().lower() or "auto"
    return {"0": "0", "off": "0", "false": "0", "1": "1", "on": "1", "true": "1"}.get(m, "auto")


def load():
    """The compiled module, or None (disabled, or it cannot be built here)."""
    global _MODULE, _TRIED
    mode = _mode()
    if mode == "0":
        return None
    with _LOCK:
        if not _TRIED:
            _TRIED = True
            try:
                from torch.utils.cpp_extension import load_inline

                log.info("building the guard's native fast path (once; cached afterwards)")
                _MODULE = load_inline("kernelaudit_guard_native", cpp_sources=[SOURCE],
                                      functions=["register_op", "unregister_all", "inspected", "reset_inspected"],
                                      extra_cflags=["-O2"], verbose=False)
                _define_slow_ops()
            except Exception as e:  # no compiler, no ninja, no headers: the Python path works
                _MODULE = None
                if mode == "1":
                    raise
                log.info("native fast path unavailable (%s: %s); using Python overrides", type(e).__name__,
                         str(e).strip().splitlines()[0] if str(e).strip() else "")
    return _MODULE


def _define_slow_ops() -> None:
    """``kernelaudit_guard::<op>.<overload>`` with the aten schemas (defined once)."""
    global _DEF_LIB
    if _DEF_LIB is not None:
        return
    lib = torch.library.Library(SLOW_NS, "DEF")
    for op in OPERANDS:
        for ov in ("default", "out"):
            schema = str(getattr(getattr(torch.ops.aten, op), ov)._schema)
            lib.define(schema.split("::", 1)[1])
    _DEF_LIB = lib


def slow_op_name(op: str, overload: str) -> str:
    return op if overload == "default" else f"{op}.{overload}"
