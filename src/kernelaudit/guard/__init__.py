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

from .engine import Engine, GuardStats
from .install import (ENV_ACTION, GuardMode, current, guarding, install, install_from_env, is_installed,
                      reset_stats, stats, uninstall)
from .rules import (ACTIONS, Call, Hit, Policy, Rule, blanket_policy, make_policy, mps_policy, policy_for,
                    wrap32_policy)
from .split import Plan, make_plan
from ..errors import UnsafeCallError

__all__ = [
    "install", "uninstall", "guarding", "install_from_env", "is_installed", "current", "stats", "reset_stats",
    "Rule", "Policy", "Call", "Hit", "mps_policy", "wrap32_policy", "blanket_policy", "policy_for", "make_policy",
    "Engine", "GuardStats", "GuardMode", "Plan", "make_plan", "UnsafeCallError", "ACTIONS", "ENV_ACTION",
]
