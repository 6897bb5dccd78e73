"""Errors raised by kernelaudit.

Three kinds of outcome are kept apart (as torch.testing does):

* :class:`InvalidArgument` - the caller asked for something impossible; the message
  names the argument and the allowed values.
* :class:`UnsafeCallError` - the guard refused a call a fault rule says is wrong.
* :class:`CheckerBug` - kernelaudit itself reached a state it should not; please report.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Exit codes of every kernelaudit command, defined here once.
EXIT_OK = 0  #: nothing wrong
EXIT_FOUND = 1  #: something is wrong (a wrong or error verdict, a mismatch)
EXIT_USAGE = 2  #: bad arguments: the message names the argument and the allowed values
EXIT_UNJUDGED = 3  #: could not judge (an unreadable run store, a problem that cannot run)


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


def resolve_device(device: str) -> str:
    """``auto`` -> cuda if present, else mps, else cpu; ``cuda:N`` accepted; a device this
    machine lacks is a bad argument naming the ones it has."""
    import torch

    has_mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else ("mps" if has_mps else "cpu")
    if not (device in ("cpu", "cuda", "mps") or device.startswith("cuda:")):
        raise InvalidArgument(f"Cannot have device={device!r}: allowed values are auto, cpu, cuda, cuda:N, mps")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidArgument(f"Cannot have device={device!r}: this torch sees no CUDA device; allowed: auto, cpu")
    if device == "mps" and not has_mps:
        raise InvalidArgument("Cannot have device='mps': this machine has no MPS device; allowed: auto, cpu")
    return device


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
