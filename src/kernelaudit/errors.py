"""Errors raised by kernelaudit.

Three kinds of outcome are kept apart (as torch.testing does):

* :class:`InvalidArgument` - the caller asked for something impossible; the message
  names the argument and the allowed values.
* :class:`UnsafeCallError` - the guard refused a call a fault rule says is wrong.
* :class:`CheckerBug` - kernelaudit itself reached a state it should not; please report.
"""

from __future__ import annotations

from collections.abc import Iterable


class KernelAuditError(Exception):
    """Base class of every error kernelaudit raises on purpose."""


class InvalidArgument(KernelAuditError, ValueError):
    """A bad argument: the message names it and lists what is allowed."""


class UnsafeCallError(KernelAuditError, RuntimeError):
    """Raised by the guard's ``raise`` action for a call a rule flags as unsafe."""


class CheckerBug(KernelAuditError, RuntimeError):
    """Internal inconsistency in kernelaudit; the message asks for a bug report."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (this is a bug in kernelaudit; please report it)")


def check_choice(name: str, value: object, allowed: Iterable[object]) -> None:
    """Raise :class:`InvalidArgument` unless ``value`` is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise InvalidArgument(
            f"Cannot have {name}={value!r}: allowed values are {', '.join(map(str, allowed))}"
        )


def check_choices(name: str, values: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """Validate every item of a comma list; return them in the given order, deduplicated."""
    allowed = list(allowed)
    out: list[str] = []
    for v in values:
        check_choice(name, v, allowed)
        if v not in out:
            out.append(v)
    if not out:
        raise InvalidArgument(f"Cannot have an empty {name}: allowed values are {', '.join(allowed)}")
    return out
