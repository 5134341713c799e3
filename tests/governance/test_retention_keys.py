"""A keyed append retried after retention compacted its events away (``keep_last``)
gets its original result: the compaction keeps every idempotency record, so the retry
is recognised and nothing is stored a second time; ``verify`` stays clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

POLICY = RetentionPolicy.parse("* keep_last=2\n")


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyring"])
@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_keyed_save_retried_after_keep_last_is_not_stored_again(
    tmp_path: Path, engine: str, keyed: bool
) -> None:
    keyring = Keyring({"k1": bytes(range(32))}) if keyed else None
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keyring, snapshot_every=2) as store:
            await store.save("a", {"i": 0})
            first = await store.save("a", {"i": 1}, idempotency_key="step-1")
            for i in range(2, 8):
                await store.save("a", {"i": i})
            report = await apply_retention(store, POLICY)
            assert [a.outcome for a in report.actions] == ["done"]
            assert report.actions[0].base_seq >= first.last_seq  # its events are gone
            assert (await store.backend.read("a", 0, None, limit=1))[0].seq > 2
            head = await store.backend.head_tag("a")
            again = await store.save("a", {"i": 1}, idempotency_key="step-1")
            assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq)
            assert again.duplicate
            assert await store.backend.head_tag("a") == head  # nothing written
            assert (await store.load("a")).data == {"i": 7}
            verified = await store.verify()
            assert verified.ok, verified.problems
            assert verified.keys == 1


async def test_a_record_in_clear_below_the_base_of_a_keyed_store_is_reported() -> None:
    """With a keyring, a record whose events a compaction removed is checked for its
    form (a keyed hash): one stored in clear there is a forgery, reported by verify."""
    from statekeeper.backends.memory import MemoryBackend

    backend = MemoryBackend()
    keyring = Keyring({"k1": bytes(range(32))})
    async with StateStore(backend, keyring=keyring, snapshot_every=2) as store:
        for i in range(8):
            await store.save("a", {"i": i}, idempotency_key=f"s{i}")
        await apply_retention(store, POLICY)
        assert (await store.verify()).ok
        backend._streams["a"].keys["forged"] = (1, 1, 0.0)  # (the key in clear)
        report = await store.verify()
        assert [(p.kind, p.seq) for p in report.problems] == [("idempotency", 1)]
        assert "stored in clear" in report.problems[0].reason
