"""kernelaudit.guard: fix, refuse or verify unsafe calls at run time, forward and backward.

One line guards a program::

    import kernelaudit.guard
    kernelaudit.guard.install()          # fix (default) | raise | verify | warn | off

or, for a whole program: ``kernelaudit run [--guard ACTION] -- python train.py``.

Every intercepted call that a rule of the active policy flags is fixed (computed from
safe pieces written into the output in place), refused (:class:`UnsafeCallError`
naming op, shapes, strides, dtype, rule and largest safe chunk), verified (run, then a
Freivalds check) or logged; every other call runs exactly as without the guard.
See ``docs/guard.md``.
"""

from __future__ import annotations

from .._lazy import lazy_exports

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS = {
    **dict.fromkeys(["install", "uninstall", "guarding", "install_from_env", "is_installed", "current", "stats",
                     "reset_stats", "GuardMode", "ENV_ACTION"], "intercept"),
    **dict.fromkeys(["Rule", "Policy", "Call", "Hit", "mps_policy", "wrap32_policy", "blanket_policy", "policy_for",
                     "make_policy", "ACTIONS"], "policy"),
    **dict.fromkeys(["Engine", "GuardStats"], "engine"),
    **dict.fromkeys(["Plan", "make_plan"], "split"),
    "UnsafeCallError": "kernelaudit.errors",
}
__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
