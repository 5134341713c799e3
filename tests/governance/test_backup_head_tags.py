"""Format versions 5 and 6: a whole SQLite store's page backup lists each stream's
head by its head tag (one scan of the heads table, no probe of the events). The
restore checks every tag against the chain it follows with the target's keys, so an
image edited and sealed again with the backup key (an edited head, a stream dropped,
a chain reordered, a head rolled back) is refused, nothing restored; backups of the
format before (version 2 with the heads' checksums) still restore, and an
incremental by pages after one keeps its kind of heads (version 4)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import DerivedKey, Keyring
from statekeeper.errors import BackupCorrupt, BackupError
from statekeeper.governance.backup import BackupKey, backup, restore, writer
from statekeeper.governance.backup.filecopy import LEVEL, opened_copy
from statekeeper.governance.backup.fileformat import VERSION_FILE, FrameReader, FrameWriter

from ._point_in_time import keyring

DATA = Path(__file__).parent / "data"
AGENTS = 12


async def fill(store: StateStore, agents: int = AGENTS, events: int = 4) -> None:
    """``agents`` streams in three tenants, ``events`` saves each, every second save
    with an idempotency key."""
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j % 2 else None
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j}, idempotency_key=key)


async def made(
    tmp_path: Path, keys: Keyring | None, agents: int = AGENTS, events: int = 4, **options: Any
) -> tuple[Path, BackupKey]:
    """A full backup (format 5: heads listed by their tags) of a store :func:`fill`
    filled, opened with ``keys`` and ``options``."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys, **options) as src:
        await fill(src, agents, events)
        await backup(src, file, bkey, chunk_bytes=4096)
    reader = FrameReader(file, bkey)
    try:
        assert reader.header.version == 5 and "tag" in reader.manifest["heads"]
    finally:
        reader.close()
    return file, bkey


def rewritten(
    file: Path,
    key: BackupKey,
    folder: Path,
    edit: Callable[[sqlite3.Connection], None],
    manifest_edit: Callable[[dict[str, Any], sqlite3.Connection], None] | None = None,
) -> Path:
    """The backup with its store image edited by SQL and everything sealed again WITH
    the backup key (what only a holder of the key, or a writer bug, could do): every
    chunk and the manifest authenticate; only the store's keys can tell."""
    reader = FrameReader(file, key)
    try:
        with opened_copy(reader) as copy:
            image = Path(copy).read_bytes()
        header, manifest = reader.header, dict(reader.manifest)
    finally:
        reader.close()
    db = folder / "edit.db"
    db.write_bytes(image)
    conn = sqlite3.connect(db)
    try:
        edit(conn)
        conn.commit()
        if manifest_edit is not None:
            manifest_edit(manifest, conn)
    finally:
        conn.close()
    image = db.read_bytes()
    out = folder / "edited.skb"
    with open(out, "wb") as fh:
        frames = FrameWriter(fh, header, key)
        sealer = frames.sealer(4096, 1, LEVEL)
        sealer.feed(image)
        manifest["file_bytes"] = sealer.close()
        del manifest["chunks"]
        frames.finish(manifest)
    return out


def heads_from(conn: sqlite3.Connection) -> dict[str, list[Any]]:
    rows = conn.execute(
        "SELECT agent_id, head_seq, head_tag FROM sk_agents WHERE head_seq > 0 ORDER BY agent_id"
    ).fetchall()
    return {
        "agent": [r[0] for r in rows],
        "head": [r[1] for r in rows],
        "tag": [r[2] for r in rows],
    }


def same_heads(manifest: dict[str, Any], conn: sqlite3.Connection) -> None:
    """The manifest's heads made the image's again (so only the tags can tell)."""
    manifest["heads"] = heads_from(conn)
    manifest["agents"] = manifest["copied"] = len(manifest["heads"]["agent"])
    manifest["events"] = conn.execute("SELECT count(*) FROM sk_events").fetchone()[0]


def edited_head(conn: sqlite3.Connection) -> None:
    """The tag of another stream at the same seq."""
    other = conn.execute("SELECT head_tag FROM sk_agents WHERE agent_id = 't1/a001'").fetchone()
    conn.execute("UPDATE sk_agents SET head_tag = ? WHERE agent_id = 't0/a000'", other)


def dropped_stream(conn: sqlite3.Connection) -> None:
    for table in ("sk_events", "sk_snapshots", "sk_idempotency", "sk_agents"):
        conn.execute(f"DELETE FROM {table} WHERE agent_id = 't0/a003'")


def reordered_chain(conn: sqlite3.Connection) -> None:
    """Events 2 and 3 of a stream swapped (records, seqs kept in place)."""
    rows = conn.execute(
        "SELECT seq, kind, ts, payload, checksum FROM sk_events"
        " WHERE agent_id = 't1/a004' AND seq IN (2, 3) ORDER BY seq"
    ).fetchall()
    for (seq, *_), (_, kind, ts, payload, checksum) in zip(rows, reversed(rows), strict=True):
        conn.execute(
            "UPDATE sk_events SET kind = ?, ts = ?, payload = ?, checksum = ?"
            " WHERE agent_id = 't1/a004' AND seq = ?",
            (kind, ts, payload, checksum, seq),
        )


def rolled_back_head(conn: sqlite3.Connection) -> None:
    """The head event removed (with its idempotency record: left, a record past the head
    is refused on its own), the head moved back to seq 3, the tag kept."""
    conn.execute("DELETE FROM sk_events WHERE agent_id = 't2/a005' AND seq = 4")
    conn.execute("DELETE FROM sk_idempotency WHERE agent_id = 't2/a005' AND first_seq = 4")
    conn.execute("DELETE FROM sk_snapshots WHERE agent_id = 't2/a005' AND seq = 4")
    conn.execute("UPDATE sk_agents SET head_seq = 3 WHERE agent_id = 't2/a005'")


async def refused(folder: Path, file: Path, key: BackupKey, keys: Keyring | None) -> BaseException:
    target = folder / f"r{os.urandom(4).hex()}.db"
    async with StateStore(f"sqlite:///{target}", keyring=keys) as dst:
        with pytest.raises(BackupError) as caught:
            await restore(dst, [file], key)
        assert await dst.count_agents() == 0  # nothing restored
    return caught.value


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
async def test_an_image_edited_and_sealed_again_is_refused_by_its_head_tags(
    tmp_path: Path, keyed: bool
) -> None:
    keys = keyring() if keyed else None
    file, bkey = await made(tmp_path, keys)
    work = tmp_path / "work"
    work.mkdir()
    # the helper itself: an image sealed again unchanged restores
    same = rewritten(file, bkey, work, lambda conn: None)
    async with StateStore(f"sqlite:///{tmp_path / 'ok.db'}", keyring=keys) as dst:
        assert (await restore(dst, [same], bkey)).agents == AGENTS
        assert (await dst.verify()).ok
    cases: dict[str, tuple[Callable[[sqlite3.Connection], None], str]] = {
        "an edited head": (edited_head, "head tag does not verify"),
        "a dropped stream": (dropped_stream, "holds 11 of the 12 streams"),
        "a reordered chain": (reordered_chain, "does not verify"),
        "a rolled-back head": (rolled_back_head, "head tag does not verify"),
    }
    for what, (edit, reason) in cases.items():
        # the image edited alone: its heads are no longer the manifest's
        alone = rewritten(file, bkey, work, edit)
        error = await refused(work, alone, bkey, keys)
        assert isinstance(error, BackupCorrupt), (what, error)
        if what == "a dropped stream":
            assert reason in str(error), (what, error)
            continue
        # the manifest's heads made the image's: the tags still tell
        both = rewritten(file, bkey, work, edit, same_heads)
        error = await refused(work, both, bkey, keys)
        assert isinstance(error, BackupCorrupt) and reason in str(error), (what, error)
    # the manifest's tag alone edited (the image's kept): refused before any key is used
    alone = rewritten(
        file, bkey, work, lambda conn: None, lambda m, c: m["heads"]["tag"].__setitem__(0, None)
    )
    assert "head tag differs from the manifest's" in str(await refused(work, alone, bkey, keys))

    def untag(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE sk_agents SET head_tag = NULL WHERE agent_id = 't0/a000'")

    # a stream without a tag (written before head tags) is listed by its head checksum
    # in ``untagged``: listed by neither, refused; listed there, it restores
    neither = rewritten(file, bkey, work, untag, same_heads)
    assert "by neither" in str(await refused(work, neither, bkey, keys))

    def by_checksum(manifest: dict[str, Any], conn: sqlite3.Connection) -> None:
        same_heads(manifest, conn)
        (checksum,) = conn.execute(
            "SELECT checksum FROM sk_events WHERE agent_id = 't0/a000' AND seq = 4"
        ).fetchone()
        manifest["untagged"] = {"agent": ["t0/a000"], "checksum": [checksum]}

    listed = rewritten(file, bkey, work, untag, by_checksum)
    async with StateStore(f"sqlite:///{work / 'untagged.db'}", keyring=keys) as dst:
        assert (await restore(dst, [listed], bkey)).agents == AGENTS
        assert (await dst.verify()).ok

    def wrong_checksum(manifest: dict[str, Any], conn: sqlite3.Connection) -> None:
        by_checksum(manifest, conn)
        manifest["untagged"]["checksum"][0] = bytes(16)

    wrong = rewritten(file, bkey, work, untag, wrong_checksum)
    assert "head differs from the manifest's" in str(await refused(work, wrong, bkey, keys))


async def test_a_page_backup_of_the_format_before_still_restores(tmp_path: Path) -> None:
    """``data/backup_v2_pages_main.skb``: a whole store's page backup written by the
    code before head tags (commit 2e7c186, format version 2, the heads' checksums,
    page digests): 6 agents of 4 events, an idempotency key at seq 2."""
    bkey = BackupKey(bytes(range(32, 64)))
    file = tmp_path / "old.skb"
    file.write_bytes((DATA / "backup_v2_pages_main.skb").read_bytes())
    reader = FrameReader(file, bkey)
    try:
        assert reader.header.version == 2 and "checksum" in reader.manifest["heads"]
        assert "page_digests" in reader.manifest
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        result = await restore(dst, [file], bkey)
        assert (result.agents, result.events) == (6, 24)
        assert (await dst.verify()).ok
        for i in range(6):
            assert (await dst.load(f"t{i % 2}/a{i}")).data == {"i": i, "j": 3}
        assert (await dst.save("t1/a3", {"i": 3, "j": 1}, idempotency_key="k1")).duplicate


async def test_an_incremental_keeps_its_parents_kind_of_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a version-2 parent (the heads' checksums: what the code before wrote) an
    incremental by pages is version 4, its heads compared with the parent's; after a
    version-5 parent, version 6. Each chain restores the source as it is."""
    bkey = BackupKey(os.urandom(32))
    old, old_inc = tmp_path / "old.skb", tmp_path / "old-inc.skb"
    new, new_inc = tmp_path / "new.skb", tmp_path / "new-inc.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src)
        monkeypatch.setattr(writer, "FULL_PAGES", VERSION_FILE)  # the writer before
        await backup(src, old, bkey)
        monkeypatch.undo()
        await backup(src, new, bkey)
        await src.save("t0/a000", {"after": 1})
        await src.delete("t1/a001")
        for parent, inc, version in ((old, old_inc, 4), (new, new_inc, 6)):
            result = await backup(src, inc, bkey, since=parent)
            assert (result.copied, result.events, result.deleted) == (1, 1, 1), version
            reader = FrameReader(inc, bkey)
            try:
                assert reader.header.version == version
            finally:
                reader.close()
        expected = {i.agent_id: (await src.load(i.agent_id)).data for i in await src.list_agents()}
    for chain in ([old, old_inc], [new, new_inc]):
        target = tmp_path / f"r-{chain[0].stem}.db"
        async with StateStore(f"sqlite:///{target}", keyring=keyring()) as dst:
            await restore(dst, chain, bkey)
            assert {
                i.agent_id: (await dst.load(i.agent_id)).data for i in await dst.list_agents()
            } == expected
            assert (await dst.verify()).ok
    # a page incremental after the other kind of full backup: not its parent, refused
    with pytest.raises(BackupError, match="does not follow"):
        async with StateStore(f"sqlite:///{tmp_path / 'x.db'}", keyring=keyring()) as dst:
            await restore(dst, [old, new_inc], bkey)


async def test_the_restore_checks_each_tag_with_the_one_hmac_it_made_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tag made with the target's active key is checked by making the target's tag
    (the one HMAC per stream the restore made before, to write it) and comparing; the
    tag is then written as it is. Under another active key the tag is checked with
    its own key, and the target makes its own."""

    def counting(store: StateStore) -> dict[str, int]:
        """Calls of the codec's ``check_head`` and HMACs of a head (``head_mac``, of
        any key: a tag made, or one checked by ``check_head``)."""
        calls = {"check_head": 0, "head_mac": 0}
        for owner, name in ((store.codec, "check_head"), (DerivedKey, "head_mac")):
            original = getattr(owner, name)

            def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
                calls[_name] += 1
                return _original(*args)

            monkeypatch.setattr(owner, name, counted)
        return calls

    file, bkey = await made(tmp_path, keyring())
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        calls = counting(dst)
        assert (await restore(dst, [file], bkey)).agents == AGENTS
        assert calls == {"check_head": 0, "head_mac": AGENTS}
        monkeypatch.undo()
        assert (await dst.verify()).ok
    rotated = Keyring({"k1": bytes(range(32)), "k2": bytes(range(1, 33))}, active="k2")
    async with StateStore(f"sqlite:///{tmp_path / 'r2.db'}", keyring=rotated) as dst:
        calls = counting(dst)
        assert (await restore(dst, [file], bkey)).agents == AGENTS
        assert calls == {"check_head": AGENTS, "head_mac": 2 * AGENTS}
        monkeypatch.undo()
        assert (await dst.verify()).ok
        _, tag = await dst.backend.head_tag("t0/a000")
        assert dst.codec.head_key_id(tag) == "k2"


async def test_a_renumbered_event_in_the_image_is_refused_as_a_gap(tmp_path: Path) -> None:
    """The checking pass reads each stream's seqs in one pass over its rows (C, not a
    Python step per row): an image whose stream still holds as many events as its head
    but not seqs 1..head (one renumbered) is refused as a gap with nothing restored,
    the manifest's heads made the image's (records moved between seqs:
    ``reordered_chain`` above)."""
    file, bkey = await made(tmp_path, keyring())
    work = tmp_path / "work"
    work.mkdir()

    def renumbered(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE sk_events SET seq = 0 WHERE agent_id = 't2/a002' AND seq = 2")

    error = await refused(
        work, rewritten(file, bkey, work, renumbered, same_heads), bkey, keyring()
    )
    assert isinstance(error, BackupCorrupt) and "the stream has a gap" in str(error)
