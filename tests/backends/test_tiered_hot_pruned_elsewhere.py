"""Retention compaction run through one tiered store, read through another on the same
URL (another ``StateStore`` in this process, or another process: the same thing for a
``memory://`` hot tier, which is private to the backend that opened it).

A shared hot tier (SQLite, Redis, PostgreSQL) is compacted with the durable tier, so
every store of the URL raises ``HistoryCompacted`` below the new base. A private
``memory://`` hot tier is not: the other store keeps its copy of the removed events,
and the hot-copy check (head and head tag equal the durable tier's) cannot see a
compaction, which keeps the head record — so that store still serves ``history`` from
seq 1 and ``load(at_seq=2)``. Knowing it needs the durable base on every hot read (an
extra durable read on the load path, or a head tag that commits to the base): not a
small change, so the ``memory://`` case is a strict expected failure, and
docs/backends.md states the limit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import tiered_url
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ._services import fresh_url

PRIVATE_HOT = pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "a memory:// hot tier is private to its backend: a compaction through another "
        "store of the URL keeps the head record, so the head/head-tag check passes and "
        "the private copy still serves the removed events. Not closed (h/tieredwin): the "
        "head tag is the codec's MAC of (agent, seq, link), compared by the durable "
        "engine as an append's expected tag and checked by verify, so a tag that also "
        "commits to the base needs the codec to bind it (every append's tag then "
        "depends on the base) or the tiered store to translate each expected tag (a "
        "durable read per append); a base read beside the head tag on each hot read is "
        "the extra durable read the hot tier exists to save"
    ),
)


@contextlib.contextmanager
def _hot(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "memory":
        yield "memory://"
    else:
        with fresh_url(kind, tmp_path, name="hot.db") as url:
            yield url


@pytest.fixture(
    params=[
        pytest.param("memory", marks=PRIVATE_HOT),
        "sqlite",
        "redis",
        "postgresql",
    ]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with _hot(request.param, tmp_path) as hot:
        # (hot_timeout: a hot call slowed by a loaded machine is not what is tested here;
        # a timed-out drop is test_tiered_hot_drop_failed's, and raises)
        yield tiered_url(hot=hot, durable=f"sqlite:///{tmp_path / 'durable.db'}", hot_timeout=60)


async def _outcome_of_history(store: StateStore) -> object:
    try:
        return [e.seq async for e in store.history("ag")]
    except HistoryCompacted:
        return HistoryCompacted


async def _outcome_of_load(store: StateStore, seq: int) -> object:
    try:
        return (await store.load("ag", at_seq=seq)).seq
    except HistoryCompacted:
        return HistoryCompacted


async def test_a_compaction_through_one_store_is_seen_by_every_store_of_the_url(
    url: str,
) -> None:
    async with StateStore(url) as writer, StateStore(url) as reader:
        for n in range(8):
            await writer.save("ag", {"n": n})
        # the reader's hot tier holds the whole stream (filled by this read)
        assert await _outcome_of_history(reader) == [1, 2, 3, 4, 5, 6, 7, 8]
        report = await apply_retention(writer, RetentionPolicy.parse("* keep_last=3"))
        assert [(a.agent_id, a.outcome) for a in report.actions] == [("ag", "done")]
        assert await _outcome_of_history(writer) is HistoryCompacted
        assert await _outcome_of_load(writer, 2) is HistoryCompacted
        # every store of the URL: the removed events are gone
        assert [e.seq async for e in reader.history("ag", after_seq=5)] == [6, 7, 8]
        assert await _outcome_of_history(reader) is HistoryCompacted
        assert await _outcome_of_load(reader, 2) is HistoryCompacted
        assert (await reader.load("ag")).seq == 8
