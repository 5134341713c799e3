"""A restore of one store image checks it in one merged scan of its rows
(:mod:`statekeeper.governance.backup.imagecheck`): the same plans as the general
checking pass for a backup it takes, and for an image edited and sealed again with the
backup key — a record moved between streams, a chain link edited in the middle, a
stream's last record dropped, a snapshot off its chain, a manifest edited — no plans
(the general pass then refuses it, naming what is wrong, and nothing is restored)."""

from __future__ import annotations

import contextlib
import importlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import importing as sqlite_import
from statekeeper.codec import chaincheck
from statekeeper.codec.keys import Keyring
from statekeeper.codec.pipeline import Codec
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.governance.backup.filecopy import opened_copy
from statekeeper.governance.backup.fileformat import FrameReader
from statekeeper.governance.backup.imagecheck import check_image

from ._point_in_time import keyring
from .test_backup_head_tags import made as backup_made
from .test_backup_head_tags import refused, rewritten, same_heads
from .test_restore_bulk import record_path

#: the module, not the function the package exports under the same name
restoring = importlib.import_module("statekeeper.governance.backup.restore")

AGENTS = 9
EVENTS = 5


def keys(keyed: bool) -> Keyring | None:
    return keyring() if keyed else None


async def made(tmp_path: Path, keyed: bool) -> tuple[Path, BackupKey]:
    """A store's full backup (keyed or not): snapshots (every 2 saves), idempotency keys."""
    return await backup_made(tmp_path, keys(keyed), AGENTS, EVENTS, snapshot_every=2)


def merged(store: StateStore, file: Path, bkey: BackupKey) -> dict[str, Any] | None:
    """What the merged pass makes of ``file`` (its image decrypted as a restore does)."""
    reader = FrameReader(file, bkey)
    try:
        with opened_copy(reader) as image:
            tagging = (restoring._tag_prefix(store), store.codec.head_tagger())
            return check_image(store, reader, image, 0, restoring._Plan, tagging)
    finally:
        reader.close()


def general(store: StateStore, file: Path, bkey: BackupKey, mp: pytest.MonkeyPatch) -> Any:
    """The general checking pass's plans of ``file`` (the merged pass switched off)."""
    mp.setattr(restoring, "check_image", lambda *args, **kwargs: None)
    with contextlib.ExitStack() as stack:
        ids, listed, versions = restoring._open_chain([str(file)], bkey)
        parts = restoring._parts(stack, [str(file)], bkey, ids, versions)
        plans = restoring._check(store, parts, bkey, None, len(listed))
    mp.undo()
    return plans


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
async def test_the_merged_pass_makes_the_general_pass_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    file, bkey = await made(tmp_path, keyed)
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys(keyed)) as dst:
        got = merged(dst, file, bkey)
        assert got is not None and len(got) == AGENTS
        assert got == general(dst, file, bkey, monkeypatch)
        assert all(p.snapshot is not None and p.tag is not None for p in got.values())


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
async def test_a_restore_of_one_image_follows_no_chain_stream_by_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    """The merged pass is what checks a full file backup: the per-stream chain check
    (``follow_chain``, the general pass) is not called, and what it restored verifies."""
    file, bkey = await made(tmp_path, keyed)
    calls: list[str] = []
    original = chaincheck.follow_chain

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr(restoring, "follow_chain", counted)
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys(keyed)) as dst:
        result = await restore(dst, [file], bkey)
        assert (result.agents, result.events) == (AGENTS, AGENTS * EVENTS)
        assert calls == []
        assert (await dst.verify()).ok


def _swap_between_streams(conn: sqlite3.Connection, keyed: bool) -> None:
    """Event 3 of two streams exchanged (each record authentic, in the other stream)."""
    rows = conn.execute(
        "SELECT agent_id, kind, ts, payload, checksum FROM sk_events"
        " WHERE agent_id IN ('t0/a000', 't1/a001') AND seq = 3 ORDER BY agent_id"
    ).fetchall()
    for (agent, *_), (_, kind, ts, payload, checksum) in zip(rows, reversed(rows), strict=True):
        conn.execute(
            "UPDATE sk_events SET kind = ?, ts = ?, payload = ?, checksum = ?"
            " WHERE agent_id = ? AND seq = 3",
            (kind, ts, payload, checksum, agent),
        )


def _resealed(
    agent: str, seq: int, table: str, prev: bytes
) -> Callable[[sqlite3.Connection, bool], None]:
    """A record of ``table`` sealed again with the store's key (if any), its body kept
    and its chain link ``prev`` (authentic: only the chain can tell)."""

    def edit(conn: sqlite3.Connection, keyed: bool) -> None:
        codec = Codec(keyring=keys(keyed))
        kind = "kind" if table == "sk_events" else "'snapshot'"
        record_type, ts, payload, checksum = conn.execute(
            f"SELECT {kind}, ts, payload, checksum FROM {table} WHERE agent_id = ? AND seq = ?",
            (agent, seq),
        ).fetchone()
        opened = codec.open(agent, seq, record_type, ts, payload, checksum)
        sealed = codec.seal(agent, seq, record_type, ts, opened.body, prev, fmt=opened.format)
        conn.execute(
            f"UPDATE {table} SET payload = ?, checksum = ? WHERE agent_id = ? AND seq = ?",
            (sealed.payload, sealed.checksum, agent, seq),
        )

    return edit


def _drop_last(agent: str) -> Callable[[sqlite3.Connection, bool], None]:
    def edit(conn: sqlite3.Connection, keyed: bool) -> None:
        conn.execute("DELETE FROM sk_events WHERE agent_id = ? AND seq = ?", (agent, EVENTS))
        conn.execute("DELETE FROM sk_snapshots WHERE agent_id = ? AND seq = ?", (agent, EVENTS))

    return edit


def _drop_last_and_head(conn: sqlite3.Connection, keyed: bool) -> None:
    """The head event removed and the head moved back one, the tag kept."""
    _drop_last("t2/a002")(conn, keyed)
    conn.execute("UPDATE sk_agents SET head_seq = ? WHERE agent_id = 't2/a002'", (EVENTS - 1,))


def _checksum_edited(conn: sqlite3.Connection, keyed: bool) -> None:
    """An event's stored checksum replaced, its payload kept (keyless: the chain and
    the head tag still add up; only the checksum compare tells)."""
    (checksum,) = conn.execute(
        "SELECT checksum FROM sk_events WHERE agent_id = 't0/a006' AND seq = 2"
    ).fetchone()
    conn.execute(
        "UPDATE sk_events SET checksum = ? WHERE agent_id = 't0/a006' AND seq = 2",
        (bytes(b ^ 1 for b in checksum),),
    )


def _head_in_manifest(manifest: dict[str, Any], conn: sqlite3.Connection) -> None:
    manifest["heads"]["head"][4] -= 1


_Edit = Callable[[sqlite3.Connection, bool], None]
_ManifestEdit = Callable[[dict[str, Any], sqlite3.Connection], None] | None

EDITS: dict[str, tuple[_Edit, _ManifestEdit]] = {
    "a record swapped between two streams": (_swap_between_streams, same_heads),
    "a chain link edited in the middle": (_resealed("t1/a004", 3, "sk_events", b"\xab" * 32), None),
    # the head event gone, the image's head and the manifest's moved back: only the tag
    "a stream's last record dropped": (_drop_last_and_head, same_heads),
    # the last stream's (no stream after it to show the gap): image and manifest as they were
    "the last stream's last record dropped": (_drop_last(f"t2/a{AGENTS - 1:03d}"), None),
    "a snapshot off its seq's link": (_resealed("t0/a003", 4, "sk_snapshots", b"\xcd" * 32), None),
    "an event's stored checksum edited": (_checksum_edited, None),
    "an edited manifest head": (lambda conn, keyed: None, _head_in_manifest),
}


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize("what", list(EDITS))
async def test_an_edited_image_is_no_plan_of_the_merged_pass_and_restores_nothing(
    tmp_path: Path, what: str, keyed: bool
) -> None:
    file, bkey = await made(tmp_path, keyed)
    work, plain = tmp_path / "work", tmp_path / "plain"
    work.mkdir()
    plain.mkdir()
    edit, manifest_edit = EDITS[what]
    edited = rewritten(file, bkey, work, lambda conn: edit(conn, keyed), manifest_edit)
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keys(keyed)) as dst:
        # the helper itself: sealed again unedited, the merged pass takes it
        assert merged(dst, rewritten(file, bkey, plain, lambda conn: None), bkey) is not None
        assert merged(dst, edited, bkey) is None
    error = await refused(work, edited, bkey, keys(keyed))
    assert isinstance(error, BackupCorrupt), error


async def test_a_checked_image_s_events_are_copied_whole_with_their_feed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's events copied as stored (SQLite's transfer, the feed's trigger off for
    it): the same rows as the record path, a feed row per event in id and seq order, and
    the trigger back (a save after the restore is in the feed)."""
    file, bkey = await made(tmp_path, True)
    copies: list[int] = []
    original = sqlite_import._copy_events

    def counted(conn: sqlite3.Connection, trigger: str) -> int:
        copies.append(original(conn, trigger))
        return copies[-1]

    monkeypatch.setattr(sqlite_import, "_copy_events", counted)
    bulk, records = tmp_path / "bulk.db", tmp_path / "records.db"
    async with StateStore(f"sqlite:///{bulk}", keyring=keyring()) as dst:
        await restore(dst, [file], bkey)
    assert copies == [AGENTS * EVENTS]
    await record_path(records, [file], bkey)
    feeds = []
    for db in (bulk, records):
        conn = sqlite3.connect(db)
        try:
            events = conn.execute(
                "SELECT agent_id, seq, kind, ts, payload, checksum FROM sk_events ORDER BY 1, 2"
            ).fetchall()
            feed = conn.execute("SELECT agent_id, seq FROM sk_feed ORDER BY position").fetchall()
            trigger = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'sk_feed_append'"
            ).fetchone()
        finally:
            conn.close()
        assert trigger == (sqlite_import._FEED_TRIGGER,)
        feeds.append((events, sorted(feed)))
        if db == bulk:
            assert feed == [(a, s) for a, s, *_ in events]  # in id and seq order
    assert feeds[0] == feeds[1]
    async with StateStore(f"sqlite:///{bulk}", keyring=keyring()) as dst:
        await dst.save("t0/a000", {"after": "restore"})
        assert (await dst.verify()).ok
    conn = sqlite3.connect(bulk)
    try:
        last = conn.execute("SELECT agent_id, seq FROM sk_feed ORDER BY position DESC").fetchone()
    finally:
        conn.close()
    assert last == ("t0/a000", EVENTS + 1)
