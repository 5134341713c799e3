"""The timeline of an agent retention compacted offered *Older events* at the oldest
kept event, and the button loaded nothing: the page never said the older history was
compacted, and looked as if it had failed to load. It says so instead."""

from __future__ import annotations

import re
from pathlib import Path

from tests.inspector.conftest import in_thread, make_client

ROW = re.compile(r'<tr class="event" data-seq="(\d+)">')
OLDER = re.compile(r"before=(\d+)")


def _compacted(tmp_path: Path, events: int, keep: int) -> str:
    from statekeeper import StateStore
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    url = f"sqlite:///{tmp_path / 'kept.db'}"

    async def build() -> None:
        async with StateStore(url, snapshot_every=2) as store:
            for n in range(events):
                await store.save("kept", {"n": n})
            await apply_retention(store, RetentionPolicy.parse(f"* keep_last={keep}"))

    in_thread(build)
    return url


def test_the_oldest_kept_page_says_the_rest_was_compacted(tmp_path: Path) -> None:
    with make_client(_compacted(tmp_path, 120, 60)) as client:
        page = client.get("/agent?id=kept").text
        assert [int(s) for s in ROW.findall(page)][-1] == 71
        assert OLDER.findall(page) == ["71"]
        older = client.get("/agent/events?id=kept&before=71").text
        assert [int(s) for s in ROW.findall(older)] == list(range(70, 60, -1))
        assert OLDER.findall(older) == []  # (was: before=61, which loaded nothing)
        assert "compacted the history up to seq 60" in older


def test_a_page_holding_every_kept_event_says_it_at_once(tmp_path: Path) -> None:
    with make_client(_compacted(tmp_path, 12, 3)) as client:
        page = client.get("/agent?id=kept").text
        assert [int(s) for s in ROW.findall(page)] == [12, 11, 10]
        assert OLDER.findall(page) == [] and "compacted the history up to seq 9" in page
