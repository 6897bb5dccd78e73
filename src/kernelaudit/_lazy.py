"""Lazy exports: a package names what it exports and from which submodule, and a name
is imported on first use. So ``import kernelaudit.guard`` loads no other product, and
``import kernelaudit`` loads nothing heavy."""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to the
    module defining it (a submodule name, or an absolute ``kernelaudit...`` path). A
    name once loaded is kept in the package, so later lookups cost nothing."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if module.startswith("kernelaudit") else f"{package}.{module}"
        value = getattr(importlib.import_module(full), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
