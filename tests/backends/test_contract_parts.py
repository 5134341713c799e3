"""The backend contract is assembled from parts (statekeeper.backends.contract): the
parts hold methods only, Backend itself every declaration, so readers of
``vars(Backend)`` (the observed wrapper's FLAGS) still see every one of them."""

from __future__ import annotations

import abc
import inspect

from statekeeper.backends import base
from statekeeper.backends.base import Backend
from statekeeper.observability.observed import FLAGS


def _parts() -> list[type]:
    return [
        k for k in Backend.__mro__[1:] if k.__module__.startswith("statekeeper.backends.contract")
    ]


def test_every_part_is_an_abc_holding_only_methods() -> None:
    parts = _parts()
    assert len(parts) == 8
    for part in parts:
        assert issubclass(part, abc.ABC)
        for name, value in vars(part).items():
            if name.startswith("__") or name == "_abc_impl":
                continue
            assert callable(value) or isinstance(value, property), (part, name)


def test_the_declarations_stay_on_backend_and_reach_the_observed_flags() -> None:
    declared = {
        name
        for name, value in vars(Backend).items()
        if not name.startswith("_") and not callable(value) and not isinstance(value, property)
    }
    assert set(FLAGS) == declared - set(base.OPENED_FLAGS)
    assert {"appends_together", "supports_leases", "feed_poll_interval"} <= set(FLAGS)


def test_every_exported_name_is_importable_from_base() -> None:
    for name in base.__all__:
        assert getattr(base, name) is not None
    assert base.validate_together.__module__ == "statekeeper.backends.contract.requests"


def test_an_engine_method_taking_an_agent_id_is_still_wrapped() -> None:
    abstract = set(Backend.__abstractmethods__)
    assert abstract == {
        "append",
        "delete_agent",
        "head",
        "health",
        "latest_snapshot",
        "list_agents",
        "lookup_key",
        "read",
        "save_snapshot",
        "seq_at",
    }

    class Engine(Backend):
        async def get_lease(self, agent_id: str) -> None:
            return None

    assert getattr(Engine.__dict__["get_lease"], "__statekeeper_checked__", False)
    assert inspect.iscoroutinefunction(inspect.unwrap(Engine.get_lease))


def test_the_memory_engines_bound_parts_are_its_own_and_checked() -> None:
    from statekeeper.backends import memory_feed, memory_keys, memory_leases
    from statekeeper.backends.contract.id_checks import _AGENT_ID_METHODS
    from statekeeper.backends.memory import MemoryBackend

    for part in (memory_feed, memory_keys, memory_leases):
        for name, fn in vars(part).items():
            if not inspect.isfunction(fn) or fn.__module__ != part.__name__:
                continue
            bound = MemoryBackend.__dict__[name]
            if name in _AGENT_ID_METHODS:
                assert getattr(bound, "__statekeeper_checked__", False), name
                assert bound.__wrapped__ is fn
            else:
                assert bound is fn, name
