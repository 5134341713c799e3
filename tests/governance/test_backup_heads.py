"""The manifest's heads of a SQLite store as columns (``stream_head_columns``): one
aggregate statement, no Python row per stream, the same lists as the rows'."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends.sqlite import export as sqlite_export
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import keyring


def _store(path: Path, agents: list[str]) -> None:
    async def make() -> None:
        async with StateStore(f"sqlite:///{path}", keyring=keyring(), snapshot_every=2) as src:
            for n, agent in enumerate(agents):
                for j in range(1 + n % 3):
                    await src.save(agent, {"n": n, "j": j})

    asyncio.run(make())


def _as_rows(conn: sqlite3.Connection) -> tuple[list[str], list[int], list[bytes]]:
    rows = sqlite_export.stream_heads(conn)
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


AGENTS = ["t2/z", "t1/ä-agent", "t0/a,b", "t1/ü\u4e2d", "t0/a", "t1/a\n2"]


def test_the_columns_are_the_rows_in_id_order(tmp_path: Path) -> None:
    _store(tmp_path / "s.db", AGENTS)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        agents, heads, checksums = sqlite_export.stream_head_columns(conn)
        assert (agents, heads, checksums) == _as_rows(conn)
        assert agents == sorted(AGENTS) and heads == [1 + AGENTS.index(a) % 3 for a in agents]
        # checksums of any bytes (NULs, bytes that are not UTF-8) come back as they are
        conn.execute(
            "UPDATE sk_events SET checksum = x'00ff00fe' || substr(checksum, 5)"
            " WHERE agent_id = 't0/a'"
        )
        conn.commit()
        got = sqlite_export.stream_head_columns(conn)
        assert got == _as_rows(conn) and got[2][0][:4] == b"\x00\xff\x00\xfe"
    finally:
        conn.close()


@pytest.mark.parametrize(
    "damage",
    [
        # a stream without an event at its head (damaged): listed, checksum empty
        "DELETE FROM sk_events WHERE agent_id = 't1/ä-agent' AND seq = 2",
        # checksums of different lengths: the rows answer
        "UPDATE sk_events SET checksum = x'0102' WHERE agent_id = 't0/a,b'",
    ],
)
def test_what_the_aggregate_cannot_say_takes_the_rows(tmp_path: Path, damage: str) -> None:
    _store(tmp_path / "s.db", AGENTS)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        conn.execute(damage)
        conn.commit()
        assert sqlite_export.stream_head_columns(conn) == _as_rows(conn)
    finally:
        conn.close()


def test_a_store_without_streams_has_empty_columns(tmp_path: Path) -> None:
    _store(tmp_path / "s.db", [])
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        assert sqlite_export.stream_head_columns(conn) == ([], [], [])
    finally:
        conn.close()


async def test_a_page_backup_lists_the_heads_and_restores(tmp_path: Path) -> None:
    await asyncio.to_thread(_store, tmp_path / "s.db", AGENTS)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        expected = _as_rows(conn)
    finally:
        conn.close()
    key = BackupKey(bytes(range(100, 132)))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await backup(src, tmp_path / "b.skb", key)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        tags = _tag_rows(conn)
    finally:
        conn.close()
    reader = FrameReader(tmp_path / "b.skb", key)
    try:
        heads = reader.manifest["heads"]
        assert reader.header.version == 5  # the heads as the heads table's tags
        assert (heads["agent"], heads["head"]) == expected[:2]
        assert heads["tag"] == tags and reader.manifest["untagged"] == {"agent": [], "checksum": []}
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 't.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        for agent in AGENTS:
            assert (await dst.load(agent)).data["n"] == AGENTS.index(agent)


def _tag_rows(conn: sqlite3.Connection) -> list[bytes]:
    rows = conn.execute("SELECT head_tag FROM sk_agents WHERE head_seq > 0 ORDER BY agent_id")
    return [r[0] for r in rows]


def test_the_tag_columns_are_the_heads_table_in_id_order(tmp_path: Path) -> None:
    """Versions 5 and 6: one scan of ``sk_agents`` (no probe of the events) gives the
    heads as columns, the same as the table's rows in id order."""
    from statekeeper.governance.backup.tagheads import tag_head_columns

    _store(tmp_path / "s.db", AGENTS)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        agents, heads, tags, untagged = tag_head_columns(conn)
        assert (agents, heads) == _as_rows(conn)[:2] and agents == sorted(AGENTS)
        assert tags == _tag_rows(conn) and all(len(t) == 36 for t in tags)
        assert untagged == {"agent": [], "checksum": []}
    finally:
        conn.close()


@pytest.mark.parametrize("at", [0, 2, -1])
@pytest.mark.parametrize("damage", ["a tag of another length", "a stream without a tag"])
def test_tags_the_aggregate_cannot_split_take_the_rows(
    tmp_path: Path, damage: str, at: int
) -> None:
    """Tags of several lengths (several key ids) are read as rows; a stream without a
    tag (written before head tags) is listed with None and its head checksum. The
    statement measures every tag against the first stream's: the odd one first (its
    length is then the one the others differ from), in the middle or last."""
    from statekeeper.governance.backup.tagheads import tag_head_columns

    _store(tmp_path / "s.db", AGENTS)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        checksums = _as_rows(conn)[2]
        tags: list[bytes | None] = list(_tag_rows(conn))
        if damage == "a tag of another length":
            tags[at] = b"\x01\x03k10" + bytes(32)
        else:
            tags[at] = None
        agent = sorted(AGENTS)[at]
        conn.execute("UPDATE sk_agents SET head_tag = ? WHERE agent_id = ?", (tags[at], agent))
        conn.commit()
        agents, heads, found, untagged = tag_head_columns(conn)
        assert (agents, heads) == _as_rows(conn)[:2] and found == tags
        expected = {"agent": [agent], "checksum": [checksums[at]]} if tags[at] is None else None
        assert untagged == (expected or {"agent": [], "checksum": []})
    finally:
        conn.close()


@pytest.mark.parametrize("count", [0, 1, 511, 512, 513, 1024, 1537])
@pytest.mark.parametrize("width", [1, 36, 41])
def test_the_tags_cut_in_groups_are_the_tags(count: int, width: int) -> None:
    """The tags of many streams, cut a group of 512 per unpack and the rest one by one,
    are each stream's ``width`` bytes in order, whatever the count."""
    from statekeeper.governance.backup.tagheads import _cut

    tags = bytes(i % 251 for i in range(count * width))
    assert _cut(tags, width) == [tags[i * width : (i + 1) * width] for i in range(count)]


_ID = st.one_of(
    st.text(alphabet="ab\x00\x01sk-/", max_size=8),
    st.text(alphabet="ab\x00/", max_size=6).map(lambda t: "\x01sk-" + t),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(st.one_of(_ID, st.integers(), st.none()), max_size=12))
def test_the_own_streams_found_in_the_joined_ids_are_the_prefixed_ones(ids: list[object]) -> None:
    """The store's own streams among a backup's ids (found in the NUL-joined ids) are
    the ids that begin with the internal prefix, sorted: with ids holding a NUL, the
    prefix inside an id, an empty id, or an id that is not a string."""
    from statekeeper.arguments import INTERNAL_PREFIX
    from statekeeper.governance.backup.tagheads import internal_streams as _internal

    expected = sorted(a for a in ids if isinstance(a, str) and a.startswith(INTERNAL_PREFIX))
    assert _internal(ids) == tuple(expected)
    assert _internal(iter(ids)) == tuple(expected)
