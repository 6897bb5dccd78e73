"""The Triton interpreter as kernelaudit runs it (CPU tensors, ``TRITON_INTERPRET=1``).

Triton's interpreter builds an integer-overflow check around every 32-bit ``+``, ``-``
and ``*`` it interprets (``sanitize_overflow``: the operands cast to int64, the result
compared with the int32 range) and hands it to ``device_assert``, which the interpreter
drops unless its ``debug`` option is on, and nothing turns that on. So the check is
computed and thrown away: about half the interpreter's time on index-heavy kernels (the
oracle detection table: 39 s -> 19 s on 2 CPU cores, Triton 3.9). :func:`skip_dead_overflow_checks`
turns it off where it is dead; results cannot change (the check never reaches a kernel's
values), and a debugging session that turns ``debug`` on keeps it. The module every
product's kernels import calls it right after importing triton (``repro.epilogue``,
``conform.kernels``, ``zoo.problems.solution_kernels``, ``sweep.kernels``; importing a
product that only may run kernels, such as ``kernelaudit.repro``, imports no triton); the
interpreter's options are process-wide, so kernels of users' files run without the checks too.
"""

from __future__ import annotations

import dataclasses


def skip_dead_overflow_checks() -> bool:
    """Stop the interpreter computing overflow checks it discards (see the module). A
    no-op where the interpreter is not in use, is a Triton without this option, or has
    ``debug`` on. Returns whether the checks are now skipped. Call after
    ``TRITON_INTERPRET`` is set (it imports triton)."""
    from .config import interpreter_requested

    if not interpreter_requested():
        return False
    try:
        from triton.runtime import interpreter
    except ImportError:  # no triton: nothing runs interpreted
        return False
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not hasattr(options, "sanitize_overflow"):
        return False
    if getattr(options, "debug", False):  # the checks would assert: keep them
        return False
    if options.sanitize_overflow:
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True
