"""The sync faces have the async API's real signatures (issue 13 item 2): same
parameter names, kinds, defaults and annotations, so editors and mypy see them; and
every public method of the async classes has its blocking twin."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper.store import DurableAgent, StateStore, SyncDurableAgent, SyncStateStore

#: async methods without a blocking twin, and why
NO_TWIN = {
    (DurableAgent, "open"): "a constructor: SyncStateStore.agent() builds the sync agent",
}
#: async return annotation -> the blocking twin's
RETURNS = {
    "AsyncIterator[Event]": "Iterator[Event]",
    "AsyncIterator[AgentInfo]": "Iterator[AgentInfo]",
    "DurableAgent": "SyncDurableAgent",
    "Subscription": "SyncSubscription",  # the subscription, driven from the sync face
}
PAIRS = [(StateStore, SyncStateStore), (DurableAgent, SyncDurableAgent)]


def _public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        static = inspect.getattr_static(cls, name)
        if isinstance(static, property) or not callable(getattr(cls, name)):
            continue
        found[name] = getattr(cls, name)
    return found


def _shape(fn: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[1].__name__)
def test_every_async_method_has_a_blocking_twin(pair: tuple[type, type]) -> None:
    async_cls, sync_cls = pair
    sync_methods = _public_methods(sync_cls)
    missing = [
        name
        for name in _public_methods(async_cls)
        if name != "__init__" and name not in sync_methods and (async_cls, name) not in NO_TWIN
    ]
    assert not missing, f"{sync_cls.__name__} lacks {missing}"


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[1].__name__)
def test_the_twins_have_the_same_signatures(pair: tuple[type, type]) -> None:
    async_cls, sync_cls = pair
    sync_methods = _public_methods(sync_cls)
    checked = 0
    for name, fn in _public_methods(async_cls).items():
        if name == "__init__" and async_cls is DurableAgent:
            continue  # built by SyncStateStore.agent(), not by the user
        twin = sync_methods.get(name)
        if twin is None:
            continue
        assert _shape(twin) == _shape(fn), f"{sync_cls.__name__}.{name}"
        ret = inspect.signature(fn).return_annotation
        assert inspect.signature(twin).return_annotation == RETURNS.get(ret, ret), name
        for kind in ("var_keyword", "var_positional"):
            assert all(
                p.kind.name.lower() != kind for p in inspect.signature(twin).parameters.values()
            ), name
        checked += 1
    assert checked >= (20 if async_cls is StateStore else 5)


def test_the_sync_store_passes_every_option_through() -> None:
    with SyncStateStore("memory://", snapshot_every=7, cache_size=3, durability="group") as store:
        assert store.store.snapshot_every == 7
        assert store.store.durability == "group"
        store.save("a", {"n": 1}, actor="me", info={"why": "test"})
        event = list(store.history("a"))[-1]
        assert event.actor == "me"
