"""Product 1, the sweep: real ops on a real device around 2^31 / 2^32 / 2*2^32
elements, judged against references that never cross those sizes; a boundary map.

Public: :func:`run_sweep` (``schedule``), :class:`GridSpec`, :class:`Case` and
:func:`grid` (``cases``), :func:`load_run` (``report``). Everything else is private to
the product; ``docs/architecture.md`` maps its modules.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {"run_sweep": "schedule", "GridSpec": "cases", "Case": "cases", "grid": "cases", "load_run": "report"}
__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
