"""The ``actor`` of an event says who wrote it. On a store opened as a principal it is
the principal; writing as someone else (``actor=`` another name: history as others
wrote it, as an import or a restore writes it) needs ``admin`` on the namespace.

Before, any principal that may ``write`` could pass ``actor="ops"``: the stream then
named a writer that never wrote it (the history, the inspector and exports said "ops"),
silently, although the documentation says ``write`` never allows it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import AuditLog

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def test_a_writer_cannot_name_another_actor_an_admin_can(as_principal: Make) -> None:
    alice = as_principal("alice")  # writes acme/support, reads acme
    calls: tuple[Callable[[], Awaitable[object]], ...] = (
        lambda: alice.save("acme/support/t1", {"n": 1}, actor="ops"),
        lambda: alice.create("acme/support/t2", {"n": 1}, actor="ops"),
        lambda: alice.append("acme/support/t1", "note", {"x": 1}, actor="bob"),
    )
    for call in calls:
        with pytest.raises(AccessDenied, match="actor"):
            await call()
    assert await alice.head("acme/support/t1") == 0  # nothing written
    await alice.save("acme/support/t1", {"n": 1}, actor="alice")  # itself: fine
    await alice.save("acme/support/t1", {"n": 2})
    assert [e.actor async for e in alice.history("acme/support/t1")] == ["alice", "alice"]

    ops = as_principal("ops")  # admin on **: writes history as others wrote it
    await ops.save("acme/support/t1", {"n": 3}, actor="importer:alice")
    assert [e.actor async for e in ops.history("acme/support/t1", after_seq=2)] == [
        "importer:alice"
    ]
    entries = [
        (e.principal, e.operation, e.outcome, e.detail.get("actor"))
        async for e in AuditLog(ops.backend, KEYRING).entries()
    ]
    assert ("alice", "save", "denied", "ops") in entries
    assert ("alice", "append", "denied", "bob") in entries
