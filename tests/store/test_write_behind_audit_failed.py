"""A governed store's write-behind flush whose write fails, and whose ``error:`` audit
record fails too: the flush reports the write's error for the agent (what failed first),
the audit failure noted on it (:func:`statekeeper.store.governed.noting_failure`). Was: the audit
record's error replaced the write's, and the caller never learned what failed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import BackendError, WriteBufferError
from statekeeper.governance import Audit, parse_policy
from statekeeper.security import Keyring
from statekeeper.store.governed import governance_of

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')


async def test_a_failed_write_behind_flush_whose_audit_record_fails_raises_the_write_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keyring({"k1": os.urandom(32)})
    store = StateStore(
        SQLiteBackend(str(tmp_path / "s.db")),
        principal="ops",
        witness=False,
        keyring=keys,
        policy=POLICY,
        audit=Audit(),
        durability="async",
        flush_size=100,
        flush_interval=3600.0,
    )
    async with store:
        await store.save("acme/a", {"n": 0})
        await store.flush()
        sink = store._ahead_sink  # type: ignore[attr-defined]
        gov = governance_of(store)
        assert sink is not None and gov is not None and gov.audit is not None

        async def refused(requests: Any, marks: Any) -> list[Any]:
            return [BackendError("the engine refused the append") for _ in requests]

        async def failing_audit(operation: str, *args: Any, **kwargs: Any) -> Any:
            raise BackendError("the audit log is unreachable")

        await store.save("acme/a", {"n": 1})  # acknowledged, in the buffer
        monkeypatch.setattr(sink, "write_with", refused)
        monkeypatch.setattr(gov.audit, "record", failing_audit)
        with pytest.raises(WriteBufferError) as raised:
            await store.flush()
        monkeypatch.undo()
        failed = raised.value.failures["acme/a"]
        assert "refused the append" in str(failed), failed
        notes = getattr(failed, "__notes__", [])
        assert any("the audit log is unreachable" in n for n in notes), notes
