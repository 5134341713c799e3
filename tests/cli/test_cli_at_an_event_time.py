"""``show --at-time T`` with the time ``history --json`` gives an event shows the state
right after that event: the stored timestamp has more digits than the microseconds an
ISO time shows, and the time rounded down used to read as before the event (the state
one event earlier, or "did not exist yet" for the first)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app

# stored times whose microseconds round down when shown (…232|2, …046|4)
TIMES = [1_796_479_347.0002322, 1_796_479_347.0461954, 1_796_479_348.5000004]


def test_an_events_own_time_shows_the_state_after_it(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'at.db'}"
    clock = iter(TIMES)
    store = SyncStateStore(url, clock=lambda: next(clock), cache_size=0)
    try:
        for n in range(len(TIMES)):
            store.save("a", {"n": n})
    finally:
        store.close()
    history = runner.invoke(app, ["history", "a", "--db", url, "--json"])
    assert history.exit_code == 0, history.output
    events = [json.loads(line) for line in history.stdout.splitlines()]
    assert len(events) == len(TIMES)
    for event in events:
        shown = runner.invoke(app, ["show", "a", "--db", url, "--at-time", event["time"], "--json"])
        assert shown.exit_code == 0, (event, shown.output)
        assert json.loads(shown.stdout)["seq"] == event["seq"]
