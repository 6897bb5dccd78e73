"""Arming the guard in a child started by ``kernelaudit run``.

The guard is installed right after ``torch`` finishes importing (an import hook), so
programs that never import torch are not slowed down. At exit the counters are
printed to stderr and, with ``$KERNELAUDIT_GUARD_STATS``, written as JSON.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import sys

from kernelaudit.config import GUARD_QUIET, GUARD_STATS

#: Path where the child writes its counters as JSON at exit (set by ``--stats-json``).
ENV_STATS = GUARD_STATS.name
#: Set to 1 to suppress the one-line summary at exit.
ENV_QUIET = GUARD_QUIET.name


def _install() -> None:
    from . import install_from_env, stats

    engine = install_from_env()

    def report() -> None:
        s = stats()
        if GUARD_QUIET.raw() != "1":
            sys.stderr.write(s.summary() + "\n")
        path = GUARD_STATS.raw()
        if path:
            with open(path, "w") as f:
                json.dump(s.to_json(), f)

    if engine is not None:
        atexit.register(report)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Wraps torch's loader so the guard installs once ``import torch`` has finished."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            _install()

        spec.loader.exec_module = exec_then_install
        return spec


def arm() -> None:
    """Install now if torch is loaded, otherwise right after it is."""
    if "torch" in sys.modules:
        _install()
    else:
        sys.meta_path.insert(0, _AfterTorch())



#: The ``sitecustomize.py`` that ``kernelaudit run`` writes into a temporary folder put
#: first on the child's PYTHONPATH (written at run time, so it needs no package data).
#: It arms the guard, then runs any other ``sitecustomize`` it shadows.
SITECUSTOMIZE = '''"""Written by kernelaudit run: arm the guard, then chain any other sitecustomize."""
import os
import sys

try:
    from kernelaudit.guard._boot import arm
    arm()
except Exception as e:  # never stop the user's program from starting
    sys.stderr.write(f"kernelaudit run: could not arm the guard: {type(e).__name__}: {e}\\n")


def _chain_other_sitecustomize():
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        cand = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("_kernelaudit_chained_sitecustomize", cand)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return


_chain_other_sitecustomize()
'''
