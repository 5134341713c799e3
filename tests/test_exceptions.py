"""Every exception (and warning) class statekeeper defines roots in StatekeeperError,
so ``except StatekeeperError`` catches everything the library raises on purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import statekeeper
from statekeeper import StatekeeperError


def _modules() -> list[str]:
    names = [statekeeper.__name__]
    for info in pkgutil.walk_packages(statekeeper.__path__, statekeeper.__name__ + "."):
        names.append(info.name)
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("statekeeper"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_the_walk_finds_the_package_exceptions() -> None:
    found = _exception_classes()
    # the walk reaches submodules, private classes included
    assert "statekeeper.concurrency.merge.Unresolved" in found
    assert "statekeeper.errors.InvalidArgument" in found
    assert "statekeeper.security.rekey._Restart" in found
    assert len(found) >= 35


def test_every_exception_class_roots_in_statekeeper_error() -> None:
    strays = sorted(
        name for name, cls in _exception_classes().items() if not issubclass(cls, StatekeeperError)
    )
    assert strays == []
