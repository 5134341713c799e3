"""An engine whose ``append_together`` predates ``StreamChange.prune_head``.

A governed store's compaction commits with its audit entry
(``Backend.append_together``), its prune conditional on the head it was planned on
(``prune_head``, ``prune_checksum``). A third-party engine whose ``append_together`` was
written before those fields reads only ``snapshot``, ``prune_to`` and ``drop_snapshots``:
it pruned whichever stream was there — an agent deleted and written again by another
process up to the same head after retention's last look lost its acknowledged history,
"compact done". Now such an engine (no ``prunes_together_at_head`` declaration) is
refused with ``CapabilityUnsupported`` naming it, nothing written; retention reports the
compaction failed, saying why; the conformance suite fails on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.backends.base import validate_together
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import CapabilityUnsupported
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance import retention as r
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.observability import instrument
from statekeeper.records import AppendRequest, AppendResult, StreamChange
from statekeeper.testing import request, snapshot
from statekeeper.testing.prune_at import PruneAtConformance

from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')
OPTIONS: dict[str, Any] = {"keyring": KEYRING, "principal": "ops", "policy": ADMIN}


class OldTogether(MemoryBackend):
    """A third-party engine: its ``append_together`` knows the fields of a stream
    change it was written against (no ``prune_head``, no ``prune_checksum``)."""

    prunes_together_at_head = False

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        known = [dataclasses.replace(c, prune_head=None, prune_checksum=None) for c in changes]
        return await super().append_together(requests, known)


@pytest.mark.parametrize("wrapped", [False, True], ids=["engine", "instrumented"])
async def test_a_governed_compaction_names_the_engine_and_writes_nothing(
    wrapped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(OldTogether(), audit=Audit(), **OPTIONS) as store:
        if wrapped:
            instrument(store, registry=CollectorRegistry(), tracing=False)
        for i in range(9):
            await store.save("acme/b", {"old": i})
        look = r.check_unchanged  # type: ignore[attr-defined]

        async def looked_then_made_again(*args: Any) -> None:
            await look(*args)  # another process, right after the last look
            await store.delete("acme/b")
            for i in range(9):  # head 9 again: another stream
                await store.save("acme/b", {"new": i})

        monkeypatch.setattr(r, "check_unchanged", looked_then_made_again)
        report = await apply_retention(store, RetentionPolicy.parse("acme keep_last=3\n"))
        monkeypatch.undo()
        [action] = report.actions
        assert (action.kind, action.outcome) == ("compact", "failed")
        assert f"{OldTogether.__module__}.OldTogether" in action.reason
        assert "prunes_together_at_head" in action.reason
        assert "Nothing was written" in action.reason
        store._reads.forget("acme/b")
        assert [e.seq async for e in store.history("acme/b")] == list(range(1, 10))
        assert (await store.load("acme/b")).data == {"new": 8}  # acknowledged, kept


async def test_the_engine_refuses_it_too_and_the_conformance_suite_finds_it() -> None:
    old, current = OldTogether(), MemoryBackend()
    case = PruneAtConformance()
    with pytest.raises(pytest.fail.Exception, match=r"OldTogether\.append_together must"):
        await case.test_append_together_prunes_at_the_head_it_names(old)
    await case.test_append_together_prunes_at_the_head_it_names(current)
    change = StreamChange("a", snapshot=snapshot(2), prune_to=2, prune_head=4)
    with pytest.raises(CapabilityUnsupported, match="prune at the head's identity"):
        validate_together([request("b", 0)], [change], old)  # (an engine checking its own)
    validate_together([request("b", 0)], [change], current)
    await old.close()
    await current.close()
