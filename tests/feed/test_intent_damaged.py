"""A feed intent whose record does not open (damaged, altered, sealed under a key the
keyring no longer holds), outside row-level security.

Under row-level security such an intent was left for ``verify`` to name (a tenant's
role could write one so); elsewhere it raised out of every settle: the store's every
delete and forget (each settles the intents a crash left first) failed with
IntegrityError, on every engine, for good, and the whole store's ``verify`` — the
tool to find such damage — raised the same error instead of reporting it, with every
other problem unreported. It is now left and named the same way everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store import feed_intents as fi


@pytest.mark.parametrize("split", [False, True], ids=["together", "split"])
async def test_an_intent_that_does_not_open_fails_no_delete_and_verify_names_it(
    tmp_path: Path, split: bool
) -> None:
    backend = SQLiteBackend(str(tmp_path / "s.db"))
    if split:  # (deletes through an intent, as on Redis Cluster, tiered, S3)
        backend.appends_together = False
    async with StateStore(backend, witness=False) as store:
        for n in range(2):
            for agent_id in ("x", "y"):
                await store.save(agent_id, {"n": n})
        stream = fi.PENDING + "0123456789abcdef"
        raw = RawEvent(1, "statekeeper.delete_intent", 1.0, b"damaged", bytes(32))
        await store.backend.append(AppendRequest(stream, 0, [raw]))
        report = await store.verify()  # (was: IntegrityError)
        (problem,) = [p for p in report.problems if p.kind == "feed"]
        assert problem.agent_id == stream and "does not open" in problem.reason
        assert await store.delete("y")  # (was: IntegrityError, every delete)
        assert await store.head("y") == 0
        (intent,) = await store.feed_intents()
        assert intent.state == "unopened"
        (done,) = await store.settle_feed_intents(older_than=0.0, force=True)
        assert done.outcome == "refused"
        assert await store.backend.head(stream) == 1  # left as it is, for a person
        deleted = [c.agent_id async for c in store.subscribe(stop_at_head=True) if c.deleted]
        assert deleted == ["y"]
