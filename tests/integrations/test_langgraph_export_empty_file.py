"""``statekeeper langgraph export`` into an existing 0-byte file: SQLite takes it as an
empty database, so before the export created its tables in a file it does not own (an
empty log, a placeholder someone made). It is refused now (exit 2, the file named,
left empty); a file SQLite created with its content still in the ``-wal`` is a
database, and a path that does not exist is created as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.integrations.langgraph.peers import IncompatibleTarget, open_peer

from ..cli._subprocess import cli_in_process, one_error_line

pytest.importorskip("langgraph.checkpoint.sqlite")


def _source(tmp_path: Path) -> str:
    from statekeeper.integrations.langgraph import StatekeeperSaver

    url = f"sqlite:///{tmp_path / 'src.db'}"
    with StatekeeperSaver.from_url(url) as saver:
        saver.put(
            {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
            {
                "v": 4,
                "id": "1ef4f797-8335-6428-8001-8a1503f9b875",
                "ts": "2024-05-04T06:32:42.235444+00:00",
                "channel_values": {"n": 1},
                "channel_versions": {},
                "versions_seen": {},
                "updated_channels": [],
            },
            {},
            {},
        )
    return url


def test_an_existing_empty_file_is_not_a_target(tmp_path: Path) -> None:
    url = _source(tmp_path)
    out = tmp_path / "notes.log"
    out.touch()
    done = cli_in_process("langgraph", "export", url, str(out))
    assert done.code == 2, str(done)
    line = one_error_line(done)
    assert "notes.log" in line and "empty" in line, line
    assert out.stat().st_size == 0
    fresh = tmp_path / "new.sqlite"  # (a path not there: created, as before)
    assert cli_in_process("langgraph", "export", url, str(fresh)).code == 0
    assert fresh.stat().st_size > 0


def test_the_peer_opener_refuses_an_empty_file_typed(tmp_path: Path) -> None:
    out = tmp_path / "empty.sqlite"
    out.touch()
    with pytest.raises(IncompatibleTarget, match="empty"):
        open_peer(f"sqlite:///{out}", readonly=False)
    assert out.stat().st_size == 0
