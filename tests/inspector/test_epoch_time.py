"""The inspector shows an agent written at timestamp 0 at the epoch, not as "-"."""

from __future__ import annotations

from pathlib import Path

from .conftest import make_client


def test_agent_written_at_the_epoch_shows_its_times(tmp_path: Path) -> None:
    from statekeeper import SyncStateStore

    url = f"sqlite:///{tmp_path / 'epoch.db'}"
    store = SyncStateStore(url, clock=lambda: 0.0)
    try:
        store.save("zero", {"n": 1})
    finally:
        store.close()
    with make_client(url) as c:
        html = c.get("/agent?id=zero").text
    # created, written, and the event's time: all at the epoch
    assert html.count("1970-01-01 00:00:00.000Z") >= 3, html
