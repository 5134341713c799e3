"""A feed intent its owner ends (step 4: the intent deleted) while another process
reads it — ``verify`` of the whole store, ``feed-intents``, a settle — on S3.

S3 lists an intent's commit objects, then fetches them: one deleted in between raises
IntegrityError ("commit object vanished while reading"). Since a record that does not
open is left and named (``"unopened"``) instead of raised, that race was reported as a
damaged intent: ``verify`` failed naming a feed intent "that does not open, which no
delete settles" — for one already gone — and ``feed-intents`` listed it so (a settle
by age refused it). An intent whose stream is gone once its read failed was ended
meanwhile: not one left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import feed_intents as fi

from ..backends._services import fresh_url

ELSEWHERE = {"host": "another-host", "boot": "b", "pidns": "p", "pid": 4242, "start": 7}


async def _intent_of(store: StateStore, agent_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An intent of another host's delete of ``agent_id`` at its head (not made yet)."""
    head = await store.head(agent_id)
    raws = await store.backend.read(agent_id, head - 1, head)
    stream = fi.intent_stream(store.backend, agent_id)
    with monkeypatch.context() as m:
        m.setattr(fi, "claim_owner", lambda: ELSEWHERE)
        await fi._write_intent(store.backend, store.codec, stream, agent_id, head, raws[-1], False)
    return stream


def _ended_while_read(store: StateStore, stream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The intent ``stream`` deleted (its owner's end) between the listing of its commit
    objects and their fetch, once."""
    backend: Any = store.backend
    real = backend._commit_events

    def vanishing(agent_id: str, first: int, tag: str = "") -> Any:
        if agent_id == stream and backend._head_sync(stream):
            backend._delete_sync(stream)
        return real(agent_id, first, tag)

    monkeypatch.setattr(backend, "_commit_events", vanishing)


async def test_an_intent_ended_while_verify_reads_it_is_not_named_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url, witness=False) as writer:
            for n in range(2):
                await writer.save("acme/a", {"n": n})
            stream = await _intent_of(writer, "acme/a", monkeypatch)
        async with StateStore(url, witness=False) as store:  # (nothing of it cached)
            _ended_while_read(store, stream, monkeypatch)
            report = await store.verify()  # (was: "a feed intent that does not open")
            assert [p for p in report.problems if p.kind == "feed"] == []
            assert await store.backend.head(stream) == 0  # the race did happen


async def test_an_intent_ended_while_listed_is_not_listed_unopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url, witness=False) as writer:
            for n in range(2):
                await writer.save("acme/a", {"n": n})
            stream = await _intent_of(writer, "acme/a", monkeypatch)
        async with StateStore(url, witness=False) as store:
            _ended_while_read(store, stream, monkeypatch)
            assert await store.feed_intents() == []  # (was: one, "unopened")
            assert await store.backend.head(stream) == 0
            assert await store.head("acme/a") == 2  # its delete never came: intact
