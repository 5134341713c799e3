"""``statekeeper stats`` counts the events each engine still stores, not the events
ever written (the head seqs): after ``retention apply --rule '* keep_last=2'`` the
history before each agent's retention base is gone and is not counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import SyncStateStore

from ..backends._services import fresh_url
from ._subprocess import cli_in_process


@pytest.mark.parametrize(
    "engine", ["sqlite", "postgresql", "redis", pytest.param("s3", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("top", ["5", "0"])
def test_stats_counts_the_events_stored_after_retention(
    engine: str, top: str, tmp_path: Path
) -> None:
    with fresh_url(engine, tmp_path) as url:
        with SyncStateStore(url) as store:
            for agent in ("a1", "a2", "a3", "a4"):
                for n in range(5):
                    store.save(agent, {"n": n})
        applied = cli_in_process(
            "retention", "apply", "--db", url, "--rule", "* keep_last=2", "--json"
        )
        assert applied.code == 0, str(applied)
        actions = json.loads(applied.stdout)["actions"]
        prunes = all(a["outcome"] == "done" for a in actions)
        stored = 4 * 2 if prunes else 4 * 5
        as_json = cli_in_process("stats", "--db", url, "--json", "--top", top)
        assert as_json.code == 0, str(as_json)
        data = json.loads(as_json.stdout)
        assert (data["events"], data["events_written"]) == (stored, 20), data
        text = cli_in_process("stats", "--db", url, "--top", top)
        assert text.code == 0, str(text)
        row = next(ln for ln in text.stdout.splitlines() if ln.startswith("events"))
        assert f"{stored:,}" in row.split()[1], row
        if prunes:
            assert "20 written" in row, row


def test_the_memory_engine_reads_only_what_retention_kept() -> None:
    """What ``stats`` sums, ``stored_size``, on the engine the CLI cannot reopen."""
    import asyncio

    from statekeeper import StateStore
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    async def go() -> list[int]:
        async with StateStore("memory://") as store:
            for n in range(5):
                await store.save("a1", {"n": n})
            await apply_retention(store, RetentionPolicy.parse("* keep_last=2", "--rule"))
            size = await store.stored_size("a1")
            return [size.events, await store.head("a1")]

    assert asyncio.run(go()) == [2, 5]
