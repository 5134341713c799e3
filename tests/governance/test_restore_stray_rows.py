"""A store image holding rows outside its streams — an event or a snapshot past its
stream's head, events or idempotency records of an agent the heads table does not
hold, an idempotency record past its stream's head — is refused
(:class:`~statekeeper.errors.BackupCorrupt` naming the agent and the seq) and nothing
is restored, on every target: SQLite's bulk copy, the record path (a SQLite target
that already holds streams, memory). A consistent backup never holds such rows; the
streams read from the image left them out, so the restore reported success without
restoring them. The images are edited and sealed again with the backup key (the
helpers of ``test_backup_head_tags``), their manifests made the image's heads again:
only the rows themselves can tell."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import restore
from statekeeper.governance.backup.filecopy import opened_copy
from statekeeper.governance.backup.fileformat import FrameReader

from .test_backup_head_tags import rewritten, same_heads
from .test_restore_merged_check import AGENTS, EVENTS, keys, made, merged


def _event_past_head(conn: sqlite3.Connection) -> None:
    """Stream t1/a004's head event copied as seq 6 (its head stays 5)."""
    conn.execute(
        "INSERT INTO sk_events SELECT agent_id, seq + 1, kind, ts, payload, checksum"
        " FROM sk_events WHERE agent_id = 't1/a004' AND seq = ?",
        (EVENTS,),
    )


def _agent_without_head(conn: sqlite3.Connection) -> None:
    """Stream t0/a003's head row gone (its events, snapshots and keys kept)."""
    conn.execute("DELETE FROM sk_agents WHERE agent_id = 't0/a003'")


def _agent_at_head_zero(conn: sqlite3.Connection) -> None:
    """Stream t2/a005's head row moved to seq 0 (no stream), its rows kept."""
    conn.execute("UPDATE sk_agents SET head_seq = 0 WHERE agent_id = 't2/a005'")


def _snapshot_past_head(conn: sqlite3.Connection) -> None:
    """A snapshot of stream t1/a001 at seq 6 (its head stays 5)."""
    conn.execute(
        "INSERT INTO sk_snapshots SELECT agent_id, seq + 2, ts, payload, checksum"
        " FROM sk_snapshots WHERE agent_id = 't1/a001' AND seq = 4"
    )


def _keys_of_an_agent_without_head(conn: sqlite3.Connection) -> None:
    """Idempotency records of an agent with no head row and no other row (what a
    delete leaves on no engine: it removes them with the stream)."""
    conn.execute(
        "INSERT INTO sk_idempotency VALUES ('t0/gone', 'k1', 1, 1, 0), ('t0/gone', 'k2', 2, 3, 0)"
    )


def _key_past_head(conn: sqlite3.Connection) -> None:
    """An idempotency record of stream t1/a004 for seqs 6..7 (its head stays 5)."""
    conn.execute("INSERT INTO sk_idempotency VALUES ('t1/a004', 'late', 6, 7, 0)")


EDITS: dict[str, tuple[Callable[[sqlite3.Connection], None], str]] = {
    "idempotency records of an agent without a head": (
        _keys_of_an_agent_without_head,
        "agent 't0/gone': the image holds its idempotency record from seq 1 but no head",
    ),
    "an idempotency record past a head": (
        _key_past_head,
        "agent 't1/a004': the image holds its idempotency record from seq 6 past its head seq 5",
    ),
    "an event past a head": (_event_past_head, "agent 't1/a004': the image holds its event seq 6"),
    "events of an agent without a head row": (
        _agent_without_head,
        "agent 't0/a003': the image holds its event seq 1 but no head",
    ),
    "events of an agent at head 0": (
        _agent_at_head_zero,
        "agent 't2/a005': the image holds its event seq 1 but no head",
    ),
    "a snapshot past a head": (
        _snapshot_past_head,
        "agent 't1/a001': the image holds its snapshot seq 6 past its head seq 5",
    ),
}

OTHER = "other/agent"


async def _target(url: str, target: str, keyed: bool) -> StateStore:
    store = StateStore(url, keyring=keys(keyed))
    if target == "sqlite with a stream":  # the bulk copy declines it: the record path
        await store.save(OTHER, {"kept": True})
    return store


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize("target", ["sqlite", "sqlite with a stream", "memory"])
@pytest.mark.parametrize("what", list(EDITS))
async def test_an_image_with_rows_outside_its_streams_is_refused_and_nothing_restored(
    tmp_path: Path, what: str, target: str, keyed: bool
) -> None:
    file, bkey = await made(tmp_path, keyed)
    work = tmp_path / "work"
    work.mkdir()
    edit, reason = EDITS[what]
    edited = rewritten(file, bkey, work, edit, same_heads)
    url = "memory://" if target == "memory" else f"sqlite:///{tmp_path / 't.db'}"
    async with await _target(url, target, keyed) as dst:
        # the helper itself: sealed again unedited, the image restores whole
        if target == "sqlite":
            plain = tmp_path / "plain"
            plain.mkdir()
            ok = rewritten(file, bkey, plain, lambda conn: None, same_heads)
            async with StateStore(f"sqlite:///{tmp_path / 'ok.db'}", keyring=keys(keyed)) as fine:
                assert (await restore(fine, [ok], bkey)).events == AGENTS * EVENTS
        # the merged scan declines it: the general pass names it
        assert merged(dst, edited, bkey) is None
        with pytest.raises(BackupCorrupt) as caught:
            await restore(dst, [edited], bkey)
        assert reason in str(caught.value)
        assert "nothing was restored" in str(caught.value)
        held = [a.agent_id async for a in dst.iter_agents()]
        assert held == ([OTHER] if target == "sqlite with a stream" else [])
        if held:
            assert (await dst.load(OTHER)).seq == 1


async def test_the_bulk_copy_refuses_an_image_with_an_event_past_a_head(tmp_path: Path) -> None:
    """The SQLite copy itself, given the counts a restore checked of the consistent
    rows (what a checking pass that left the row out would give it): refused, its
    transaction rolled back, the target empty."""
    file, bkey = await made(tmp_path, True)
    work = tmp_path / "work"
    work.mkdir()
    edited = rewritten(file, bkey, work, _event_past_head, same_heads)
    reader = FrameReader(edited, bkey)
    try:
        with opened_copy(reader) as image:
            async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys(True)) as dst:
                with pytest.raises(BackupCorrupt) as caught:
                    await dst.backend.import_image(image, (AGENTS, AGENTS * EVENTS, AGENTS))
                assert "agent 't1/a004'" in str(caught.value)
                assert "event seq 6 past its head seq 5" in str(caught.value)
                assert await dst.count_agents() == 0
                assert [a async for a in dst.iter_agents()] == []
    finally:
        reader.close()
