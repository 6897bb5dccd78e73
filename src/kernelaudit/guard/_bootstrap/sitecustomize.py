"""Started by ``kernelaudit run`` (this folder is put first on PYTHONPATH).

Installs the guard as ``$KERNELAUDIT_GUARD`` / ``$KERNELAUDIT_FAULT_MODEL`` /
``$KERNELAUDIT_SCALE`` say, as soon as the program imports torch (a program that never
imports torch pays nothing), then runs any other ``sitecustomize`` it shadows.
"""

import os
import sys


def _kernelaudit_bootstrap() -> None:
    from kernelaudit.guard._boot import arm

    arm()


def _chain_other_sitecustomize() -> None:
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


try:
    _kernelaudit_bootstrap()
except Exception as e:  # never stop the user's program from starting
    sys.stderr.write(f"kernelaudit run: could not arm the guard: {type(e).__name__}: {e}\n")
_chain_other_sitecustomize()
