"""Lazy package attributes (PEP 562): a package's ``__getattr__`` imports the module
that defines a public name on first use, so ``import statekeeper.feed`` stays cheap.
One implementation for every package that re-exports names this way."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any


def lazy_attribute(
    package: str, namespace: MutableMapping[str, Any], where: Mapping[str, str], name: str
) -> Any:
    """``name`` from the module ``where[name]`` (relative to ``package``; a leading dot
    is optional), cached in the package's ``namespace`` so the next lookup is direct."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    relative = module if module.startswith(".") else f".{module}"
    value = getattr(importlib.import_module(relative, package), name)
    namespace[name] = value
    return value
