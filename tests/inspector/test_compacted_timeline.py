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


def _moves(tmp_path: Path, keep: int | None) -> str:
    """``m``: created idle, then 4 rounds of start_processing, complete, reset (13
    events, 12 transitions)."""
    from statekeeper import StateStore, StateTransition
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    url = f"sqlite:///{tmp_path / 'moves.db'}"
    rounds = [StateTransition.START_PROCESSING, StateTransition.COMPLETE, StateTransition.RESET]

    async def build() -> None:
        async with StateStore(url) as store:
            agent = await store.agent("m")
            for _ in range(4):
                for move in rounds:
                    await agent.transition(move)
            if keep is not None:
                await apply_retention(store, RetentionPolicy.parse(f"* keep_last={keep}"))

    in_thread(build)
    return url


def test_the_machines_counts_say_they_cover_the_kept_events_only(tmp_path: Path) -> None:
    """The diagram's ×N counts of a compacted agent are those of the kept events (×1 or
    ×2 for an arrow the agent took 4 times): the panel says so (was: the counts shown
    as if they were the whole history, silently; trial of commit 0143e545)."""
    with make_client(_moves(tmp_path, 4)) as client:
        page = client.get("/agent?id=m").text
        assert "(4 transitions)" in page
        assert re.search(r'id="counts-compacted">Counted over the events kept after seq 9', page)


def test_whole_history_counts_carry_no_such_note(tmp_path: Path) -> None:
    with make_client(_moves(tmp_path, None)) as client:
        page = client.get("/agent?id=m").text
        assert "(12 transitions)" in page and "counts-compacted" not in page


def test_a_base_past_the_budget_still_counts_the_kept_events(tmp_path: Path) -> None:
    """The budget of events read for the counts ran from seq 1: a base past it (seq 9,
    budget 5) read nothing, so the machine showed no counts and no compacted note, only
    'Counted over the first 0 events only'. It runs from the base."""
    with make_client(_moves(tmp_path, 4), history_budget=5) as client:
        page = client.get("/agent?id=m").text
        assert "(4 transitions)" in page and "first 0 events" not in page
        assert re.search(r'id="counts-compacted">Counted over the events kept after seq 9', page)
    (tmp_path / "b").mkdir()
    with make_client(_moves(tmp_path / "b", 4), history_budget=3) as client:
        page = client.get("/agent?id=m").text  # 3 of the 4 kept: both notes
        assert "(3 transitions)" in page and "Counted over the first 3" in page
        assert "counts-compacted" in page


def test_the_stores_transition_matrix_says_which_counts_are_of_kept_events(
    tmp_path: Path,
) -> None:
    """The store page's transition matrix counted a compacted agent's moves from its
    base on (4 of its 12) without saying so, as the agent page did before. It names
    the agents retention compacted; a whole history carries no such note."""
    with make_client(_moves(tmp_path, 4)) as client:
        report = client.get("/store/analysis").text
        assert "from 4 observed transition(s)" in report
        assert re.search(r'id="matrix-compacted">1 agent\(s\) compacted by retention', report)
    (tmp_path / "whole").mkdir()
    with make_client(_moves(tmp_path / "whole", None)) as client:
        report = client.get("/store/analysis").text
        assert "from 12 observed transition(s)" in report and "matrix-compacted" not in report
