"""The sync faces have the async API's real signatures (issue 13 item 2): same
parameter names, kinds, defaults and annotations, so editors and mypy see them; and
every public method of the async classes has its blocking twin — the store's and the
agent's, typed states' and the concurrency tools' (``statekeeper.concurrency.sync``)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper.concurrency import (
    Lease,
    LeaseManager,
    Steps,
    SyncLease,
    SyncLeaseManager,
    SyncSteps,
    merge_into,
    update,
    update_agent,
)
from statekeeper.concurrency import sync as blocking
from statekeeper.schema import SyncTypedStates, TypedStates
from statekeeper.store import DurableAgent, StateStore, SyncDurableAgent, SyncStateStore

#: async methods without a blocking twin, and why
NO_TWIN = {
    (DurableAgent, "open"): "a constructor: SyncStateStore.agent() builds the sync agent",
    (LeaseManager, "audit"): "the async lease's own bookkeeping (a lease event's audit entry)",
    (LeaseManager, "together"): "the async manager's engine choice (a grant with its entry)",
    (LeaseManager, "stored_id"): "id mapping for its leases: SyncLeaseManager.manager has it",
    (LeaseManager, "relative"): "id mapping for its leases: SyncLeaseManager.manager has it",
    (LeaseManager, "relative_error"): "id mapping for its errors: SyncLeaseManager.manager",
}
#: async return annotation -> the blocking twin's
RETURNS = {
    "AsyncIterator[Event]": "Iterator[Event]",
    "AsyncIterator[AgentInfo]": "Iterator[AgentInfo]",
    "DurableAgent": "SyncDurableAgent",
    "Subscription": "SyncSubscription",  # the subscription, driven from the sync face
    "AsyncIterator[StepHandle]": "Iterator[StepHandle]",  # Steps.once
    "AsyncIterator[Lease]": "Iterator[SyncLease]",  # LeaseManager.hold
    "Lease": "SyncLease",
    "Lease | None": "SyncLease | None",
    "asyncio.Task[None]": "None",  # the heartbeat's task lives on the store's loop
    # Steps.step: the decorated function blocks
    "Callable[[Callable[..., Awaitable[T] | T]], Callable[..., Awaitable[Any]]]": (
        "Callable[[Callable[..., Awaitable[T] | T]], Callable[..., Any]]"
    ),
}
PAIRS = [
    (StateStore, SyncStateStore),
    (DurableAgent, SyncDurableAgent),
    (Steps, SyncSteps),
    (LeaseManager, SyncLeaseManager),
    (Lease, SyncLease),
    (TypedStates, SyncTypedStates),
]
#: classes the user does not build (their __init__ is the face's own)
BUILT_FOR_YOU = {DurableAgent, Lease}
#: the fewest twins each pair must have
AT_LEAST = {
    StateStore: 20,
    DurableAgent: 5,
    Steps: 6,
    LeaseManager: 4,
    Lease: 6,
    TypedStates: 7,
}
#: the module functions with a blocking twin of the same name
FUNCTIONS = [update, update_agent, merge_into]


def _blocking_annotation(annotation: Any) -> Any:
    """An async parameter's annotation as its twin writes it: a tool takes the sync
    store, agent and lease where the async one takes the async ones."""
    if not isinstance(annotation, str):
        return annotation
    if annotation == "StateStore | Backend":  # a sync lease manager takes a sync store
        return "SyncStateStore"
    return re.sub(r"\b(StateStore|DurableAgent|Lease)\b", r"Sync\1", annotation)


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


def _shape(fn: Callable[..., Any], blocking: bool = False) -> list[tuple[str, Any, Any, Any]]:
    """The parameters of ``fn``; with ``blocking``, as its blocking twin should write
    them (the store's own methods take the same types: only the tools' are renamed)."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    rename = _blocking_annotation if blocking else (lambda a: a)
    return [(p.name, p.kind, p.default, rename(p.annotation)) for p in params]


def _check_twin(fn: Callable[..., Any], twin: Callable[..., Any], blocking: bool) -> None:
    assert _shape(twin) == _shape(fn, blocking), twin.__qualname__
    ret = inspect.signature(fn).return_annotation
    assert inspect.signature(twin).return_annotation == RETURNS.get(ret, ret), twin.__qualname__
    for kind in ("var_keyword", "var_positional"):
        if any(p.kind.name.lower() == kind for p in inspect.signature(fn).parameters.values()):
            continue  # (Steps.run passes its *args, **kwargs on to the step's function)
        assert all(
            p.kind.name.lower() != kind for p in inspect.signature(twin).parameters.values()
        ), twin.__qualname__


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
        if name == "__init__" and async_cls in BUILT_FOR_YOU:
            continue  # built by the sync store or manager, not by the user
        twin = sync_methods.get(name)
        if twin is None:
            continue
        _check_twin(fn, twin, blocking=async_cls not in (StateStore, DurableAgent))
        checked += 1
    assert checked >= AT_LEAST[async_cls]


def _public_properties(cls: type) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and isinstance(inspect.getattr_static(cls, name), property)
    }


def test_the_sync_lease_shows_what_the_lease_shows() -> None:
    """Its properties and the attributes a lease is read by (writes read ``fence`` and
    ``stored_id``, steps ``refusal``)."""
    shown = _public_properties(SyncLease)
    assert _public_properties(Lease) <= shown
    assert {"agent_id", "stored_id", "holder", "token", "ttl", "expires_at"} <= shown


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_the_tools_functions_have_blocking_twins_of_the_same_name(fn: Callable[..., Any]) -> None:
    twin = getattr(blocking, fn.__name__)
    assert twin is not fn and twin.__name__ in blocking.__all__
    _check_twin(fn, twin, blocking=True)


def test_the_sync_store_passes_every_option_through() -> None:
    with SyncStateStore("memory://", snapshot_every=7, cache_size=3, durability="group") as store:
        assert store.store.snapshot_every == 7
        assert store.store.durability == "group"
        store.save("a", {"n": 1}, actor="me", info={"why": "test"})
        event = list(store.history("a"))[-1]
        assert event.actor == "me"
