"""A state machine named by ``module:attr`` (the ``--machine`` option of
``statekeeper diagram`` and ``statekeeper serve``)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ..errors import ConfigurationError
from .machine import AgentStateMachine

__all__ = ["load_machine"]


def load_machine(spec: str | None) -> AgentStateMachine[Any, Any]:
    """The machine ``module:attr`` names (the default machine when ``spec`` is None).

    ``attr`` (dotted for nested attributes) is an :class:`AgentStateMachine`, or a
    callable (a class, a factory) returning one. The current directory is importable,
    as for ``python -m``. Anything else raises
    :class:`~statekeeper.errors.ConfigurationError` naming what was wrong.
    """
    if spec is None:
        return AgentStateMachine()
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"--machine must be MODULE:ATTR (e.g. myapp.flows:machine), not {spec!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, AgentStateMachine) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigurationError(
                f"{spec} is not an AgentStateMachine, and calling it failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    if not isinstance(obj, AgentStateMachine):
        raise ConfigurationError(
            f"{spec} is a {type(obj).__name__}, not an AgentStateMachine "
            "(or a callable returning one)"
        )
    return obj
