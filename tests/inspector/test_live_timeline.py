"""The live view's new events: what the page inserts when the live stream announces a
new head is exactly the events after the page's head up to the announced one — all of
them (more than a page: the newest page and a row that loads the rest in its place,
never the oldest page alone with the newer ones skipped for good), and none written
after the announcement (the next announcement brings those: they were shown twice)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.inspector.conftest import in_thread, make_client

ROW = re.compile(r'<tr class="event" data-seq="(\d+)">')
GAP = re.compile(r'<tr class="gap" data-after="(\d+)" data-to="(\d+)">')


def _store(tmp_path: Path, events: int) -> str:
    from statekeeper import StateStore

    url = f"sqlite:///{tmp_path / 'live.db'}"

    async def grow() -> None:
        async with StateStore(url) as store:
            for n in range(events):
                await store.save("busy", {"n": n})

    in_thread(grow)
    return url


def _shown(client: object, query: str) -> list[int]:
    """The seqs the page ends up showing after inserting the fragment of ``query``
    and loading every gap row it leaves, in the order they are shown."""
    html = client.get(f"/agent/events?id=busy&{query}").text  # type: ignore[attr-defined]
    seqs = [int(s) for s in ROW.findall(html)]
    gap = GAP.search(html)
    if gap is not None:  # the gap row is replaced by what it loads
        seqs += _shown(client, f"after={gap.group(1)}&to={gap.group(2)}")
    return seqs


def test_more_new_events_than_a_page_are_all_shown_newest_first(tmp_path: Path) -> None:
    # the page shows seq 2; 118 events arrive within one poll interval
    with make_client(_store(tmp_path, 120)) as client:
        assert _shown(client, "after=2&to=120") == list(range(120, 2, -1))


def test_events_written_after_the_announcement_are_left_to_the_next(tmp_path: Path) -> None:
    # the stream announced head 5 to a page showing 4; seq 6 was written before the
    # page asked: it comes with the next announcement (after=5&to=6), shown once
    with make_client(_store(tmp_path, 6)) as client:
        first = _shown(client, "after=4&to=5")
        second = _shown(client, "after=5&to=6")
        assert first + second == [5, 6]
