"""The LangGraph saver over a store opened as a principal: the policy holds for
threads as for any agent (the saver's agent ids live in its prefix's namespace)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, AuditLog, Policy
from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import KEYRING

POLICY = Policy(
    principals={
        "support-bot": {"write": ["acme/support/**"], "read": ["acme/**"]},
        "ops": {"admin": ["**"]},
    }
)


def _saver(url: str, principal: str, prefix: str) -> StatekeeperSaver:
    return StatekeeperSaver.from_url(
        url, principal=principal, policy=POLICY, audit=Audit(), keyring=KEYRING, prefix=prefix
    )


def _config(thread: str) -> dict[str, object]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_threads_follow_the_policy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    ops = _saver(url, "ops", "acme/billing/lg/")
    ops.put(_config("bill-1"), empty_checkpoint(), {"source": "input", "step": 0}, {})
    ops.close()

    saver = _saver(url, "support-bot", "acme/support/lg/")
    try:
        saved = saver.put(_config("t1"), empty_checkpoint(), {"source": "input", "step": 0}, {})
        assert saver.get_tuple(saved) is not None
        assert [c.config["configurable"]["thread_id"] for c in saver.list(None)] == ["t1"]
    finally:
        saver.close()

    # the same principal, with a saver over a namespace it may only read
    reader = _saver(url, "support-bot", "acme/billing/lg/")
    try:
        assert reader.get_tuple(_config("bill-1")) is not None
        with pytest.raises(AccessDenied):
            reader.put(_config("bill-2"), empty_checkpoint(), {"source": "input", "step": 0}, {})
        with pytest.raises(AccessDenied):
            reader.delete_thread("bill-1")
    finally:
        reader.close()

    async def audited() -> list[tuple[str | None, str, str]]:
        backend = SQLiteBackend(str(tmp_path / "lg.db"))
        try:
            log = AuditLog(backend, KEYRING)
            return [(e.principal, e.operation, e.outcome) async for e in log.entries()]
        finally:
            await backend.close()

    entries = asyncio.run(audited())
    assert ("support-bot", "create", "denied") in entries  # a new thread's stream
    assert ("support-bot", "delete", "denied") in entries
    assert ("support-bot", "create", "ok") in entries


def test_a_thread_in_a_namespace_the_principal_may_not_read_is_refused_not_absent(
    tmp_path: Path,
) -> None:
    """Listing filters what a principal may not read, so such a thread looked absent:
    ``delete_thread`` returned as if it had deleted it (nothing deleted, nothing
    audited), ``list(None)`` answered "no threads", and ``prune_retention`` and
    ``delete_for_runs`` reported a clean run over nothing. Each is refused now."""
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    ops = _saver(url, "ops", "globex/lg/")
    ops.put(_config("g-1"), empty_checkpoint(), {"source": "input", "step": 0}, {})
    ops.close()

    stranger = _saver(url, "support-bot", "globex/lg/")  # reads acme only
    try:
        refused: dict[str, Callable[[], object]] = {
            "delete_thread": lambda: stranger.delete_thread("g-1"),
            "delete_thread of no thread": lambda: stranger.delete_thread("none"),
            "list": lambda: list(stranger.list(None)),
            "prune_retention": lambda: stranger.prune_retention(keep_last=1),
            "delete_for_runs": lambda: stranger.delete_for_runs(["run-1"]),
            "prune delete": lambda: stranger.prune(["g-1"], strategy="delete"),
        }
        for name, call in refused.items():
            with pytest.raises(AccessDenied):
                call()
                pytest.fail(f"{name} was not refused")
    finally:
        stranger.close()

    ops = _saver(url, "ops", "globex/lg/")
    try:
        assert ops.get_tuple(_config("g-1")) is not None  # nothing was deleted
        assert [c.config["configurable"]["thread_id"] for c in ops.list(None)] == ["g-1"]
    finally:
        ops.close()

    async def refusals() -> list[tuple[str | None, str, str | None]]:
        backend = SQLiteBackend(str(tmp_path / "lg.db"))
        try:
            log = AuditLog(backend, KEYRING)
            return [
                (e.operation, e.outcome, e.agent_id)
                async for e in log.entries(principal="support-bot")
            ]
        finally:
            await backend.close()

    entries = asyncio.run(refusals())
    assert ("delete", "denied", "globex/lg/g-1#0") in entries
    assert ("list", "denied", None) in entries
