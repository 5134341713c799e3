"""The instrumented store's engine wrapper (:class:`ObservedBackend`) is the engine to
everything that asks: every declaration of the :class:`Backend` contract (capability
flags such as ``appends_together``) is the engine's, and every method the engine
answers itself reaches it (none falls back to the contract's default). Was: the
wrapper kept the contract's defaults for the flags added after it (``appends_together``,
``changes_leases_and_rewrites``, ``rewrites_many``, ...), so turning metrics on made a
governed store's leases, key rotations and migrations write their entries first
instead of in one commit with the change."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.observability import instrument
from statekeeper.observability.observed import ObservedBackend, observed_class

from ..backends._services import fresh_url
from ..governance.conftest import KEYRING


def _contract() -> dict[str, Any]:
    """Every public member of the contract, as :class:`Backend` declares it (its
    default), from the class and its bases."""
    out: dict[str, Any] = {}
    for cls in reversed(Backend.__mro__[:-1]):  # (not object's)
        for name, member in vars(cls).items():
            if not name.startswith("_"):
                out[name] = member
    return out


def _is_method(member: Any) -> bool:
    return callable(member) or isinstance(member, (property, staticmethod, classmethod))


def _falls_back(wrapped: Backend, engine: Backend) -> list[str]:
    """The contract's members the engine declares or answers itself for which the
    wrapper still has the contract's default, or another value than the engine's."""
    wrong = []
    for name, default in _contract().items():
        mine = inspect.getattr_static(wrapped, name)
        if _is_method(default):
            if inspect.getattr_static(engine, name) is not default and mine is default:
                wrong.append(name)
        elif getattr(wrapped, name) != getattr(engine, name):
            wrong.append(name)
    return wrong


def _everything_overridden() -> Backend:
    """An engine that declares every flag of the contract (each a value no default
    has) and answers every method of it itself: whatever the contract gains, this
    engine has it too."""
    members: dict[str, Any] = {}
    for name, default in _contract().items():
        if isinstance(default, property):
            members[name] = property(lambda self: "engine's")
        elif _is_method(default):

            def own(self: Any, *args: Any, **kwargs: Any) -> Any:
                raise AssertionError("not called here")

            members[name] = own
        else:
            members[name] = object()  # (compared by identity: equal to nothing else)
    engine_class = type("EverythingEngine", (MemoryBackend,), members)
    return cast(Backend, engine_class())


def test_the_wrapper_has_every_member_of_the_contract_an_engine_has() -> None:
    engine = _everything_overridden()
    wrapped = observed_class(engine)(engine, cast(Any, None))  # (nothing is called)
    assert _falls_back(wrapped, engine) == []


@pytest.mark.parametrize("engine_name", ["memory", "sqlite", "postgresql", "redis"])
async def test_an_instrumented_stores_backend_declares_what_its_engine_does(
    tmp_path: Path, engine_name: str
) -> None:
    with fresh_url(engine_name, tmp_path) as url:
        async with StateStore(url, witness=False) as store:
            engine = store.backend
            instrument(store, registry=CollectorRegistry(), tracing=False)
            assert isinstance(store.backend, ObservedBackend)
            assert store.backend.inner is engine
            assert _falls_back(store.backend, engine) == []


def _append_count(registry: CollectorRegistry) -> float:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if (
                s.name == "statekeeper_backend_call_duration_seconds_count"
                and s.labels.get("call") == "append"
            ):
                return float(s.value)
    return 0.0


async def test_an_instrumented_governed_save_is_one_commit_with_its_entry_and_timed(
    tmp_path: Path,
) -> None:
    """A governed SQLite store's save and its audit entry: one call of the engine's
    ``append_together`` (one commit), never an entry appended on its own; the call is
    timed as the save's append. And the audit log writes to the store's own backend,
    which is what a lease, a key rotation or a migration checks before it commits its
    change with its entry."""
    registry = CollectorRegistry()
    async with StateStore(
        f"sqlite:///{tmp_path / 'gov.db'}",
        keyring=KEYRING,
        principal="app",
        policy=parse_policy('[principals.app]\nwrite = ["tenant/**"]\n'),
        audit=Audit(),
        witness=False,
    ) as store:
        engine = store.backend
        instrumentation = instrument(store, registry=registry, tracing=False)
        calls: list[str] = []
        for name in ("append", "append_batch", "append_together"):
            method = getattr(engine, name)

            async def spy(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
                calls.append(_n)
                return await _m(*a, **k)

            setattr(engine, name, spy)
        await store.save("tenant/a", {"n": 1})
        assert calls == ["append_together"]
        assert _append_count(registry) == 1
        log = store._governance.audit  # type: ignore[attr-defined]
        assert isinstance(log, AuditLog) and log.backend is store.backend
        assert [e.operation async for e in AuditLog(engine, KEYRING).entries()] == ["save"]
        instrumentation.uninstall()  # (and back: the log writes to the engine again)
        assert store.backend is engine and log.backend is engine


def test_a_flag_the_engine_learns_as_it_opens_is_read_through() -> None:
    """``audit_links`` is set by PostgreSQL when it opens (row-level security on): a store
    instrumented before its engine opened must see it, or its audit writer reads the
    head entry a tenant role may not read. Was: copied at wrap time (False for ever)."""
    engine = MemoryBackend()
    wrapped = observed_class(engine)(engine, cast(Any, None))  # (nothing is called)
    assert wrapped.audit_links is False
    engine.audit_links = True  # what the engine's open does
    assert wrapped.audit_links is True
