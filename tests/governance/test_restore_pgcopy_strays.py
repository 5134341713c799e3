"""A PostgreSQL backup (format version 3) whose ``COPY`` sections hold rows outside its
streams — an event, a snapshot or an idempotency record past a stream's head, events or
idempotency records of an agent without a head, an event after the last head — or out of
order is refused (:class:`~statekeeper.errors.BackupCorrupt` naming the agent and the
seq, and for a row out of order the row it came after) and nothing is restored. A
consistent copy never holds such rows; the streams read from the sections left them out,
so the restore reported success without them. The sections are edited and sealed again
with the backup key (what only a holder of the key, or a writer bug, could do), the
manifest's heads and totals made the edited sections' again: only the rows themselves
can tell."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.filecopy import LEVEL, opened_copy
from statekeeper.governance.backup.fileformat import FrameReader, FrameWriter
from statekeeper.governance.backup.pgcopy import SECTIONS, SIGNATURE, _rows

from ..backends._services import fresh_url
from .test_backup_pgcopy import fill, keyring

Rows = list[list[tuple[Any, ...]]]  # per section, its rows


def _section(rows: list[tuple[Any, ...]], types: str) -> bytes:
    """Rows in PostgreSQL's binary ``COPY`` format (what the server sends)."""
    out = [SIGNATURE, b"\x00" * 8]
    for row in rows:
        out.append(struct.pack(">h", len(row)))
        for kind, value in zip(types, row, strict=True):
            if value is None:
                out.append(struct.pack(">i", -1))
                continue
            raw = (
                value.encode()
                if kind == "t"
                else struct.pack(">q", value)
                if kind == "i"
                else struct.pack(">d", value)
                if kind == "f"
                else bytes(value)
            )
            out.append(struct.pack(">i", len(raw)) + raw)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


def resealed(file: Path, key: BackupKey, out: Path, edit: Callable[[Rows], None]) -> Path:
    """The backup with its sections' rows edited and everything sealed again WITH the
    backup key; the manifest's heads (each with its head event's checksum), sizes
    and totals made the edited sections' (so only the rows can tell)."""
    reader = FrameReader(file, key)
    try:
        with opened_copy(reader, store_file=False) as copy:
            data = Path(copy).read_bytes()
        header, manifest = reader.header, dict(reader.manifest)
    finally:
        reader.close()
    view, at, rows = memoryview(data), 0, []
    for (_, size), (_, types) in zip(manifest["sections"], SECTIONS, strict=True):
        rows.append(list(_rows(view, at, at + size, types)))
        at += size
    edit(rows)
    sections = [_section(r, types) for r, (_, types) in zip(rows, SECTIONS, strict=True)]
    last = {(e[0], e[1]): e[5] for e in rows[1]}
    agents = [(a, h, last.get((a, h), b"")) for a, h, _ in rows[0]]
    manifest["heads"] = {
        c: [a[i] for a in agents] for i, c in enumerate(("agent", "head", "checksum"))
    }
    manifest["agents"] = manifest["copied"] = len(agents)
    manifest["events"] = len(rows[1])
    manifest["sections"] = [[name, len(s)] for (name, _), s in zip(SECTIONS, sections, strict=True)]
    with open(out, "wb") as fh:
        frames = FrameWriter(fh, header, key)
        sealer = frames.sealer(4096, 1, LEVEL)
        for section in sections:
            sealer.feed(section)
        manifest["file_bytes"] = sealer.close()
        del manifest["chunks"]
        frames.finish(manifest)
    return out


def _copied_past(rows: Rows, section: int, agent: str, seq: int, by: int) -> None:
    """Row ``seq`` of ``agent`` in ``section`` copied as ``seq + by`` (its head kept)."""
    row = next(r for r in rows[section] if r[0] == agent and r[1] == seq)
    at = rows[section].index(row) + 1
    while at < len(rows[section]) and rows[section][at][0] == agent:
        at += 1
    rows[section].insert(at, (agent, seq + by, *row[2:]))


def _event_past_head(rows: Rows) -> None:
    """Stream t1/a004's head event copied as seq 4 (its head stays 3)."""
    _copied_past(rows, 1, "t1/a004", 3, 1)


def _snapshot_past_head(rows: Rows) -> None:
    """A snapshot of stream t2/a005 at seq 5 (its head stays 3)."""
    seq = max(r[1] for r in rows[2] if r[0] == "t2/a005")
    _copied_past(rows, 2, "t2/a005", seq, 5 - seq)


def _agent_without_head(rows: Rows) -> None:
    """Stream t0/a003's head row gone (its events, snapshots and keys kept)."""
    rows[0][:] = [r for r in rows[0] if r[0] != "t0/a003"]


def _event_after_the_last_head(rows: Rows) -> None:
    """An event of an agent sorting after every head (no head of its own)."""
    rows[1].append(("zz/late", 1, *rows[1][-1][2:]))


def _keys_of_an_agent_without_head(rows: Rows) -> None:
    """Idempotency records of an agent with no head and no other row (what a delete
    leaves on no engine: it removes them with the stream), in their place."""
    rows[3] += [("t0/gone", "k1", 1, 1), ("t0/gone", "k2", 2, 3)]
    rows[3].sort(key=lambda r: (r[0], r[2]))


def _key_past_head(rows: Rows) -> None:
    """An idempotency record of stream t1/a004 for seqs 4..5 (its head stays 3)."""
    rows[3].append(("t1/a004", "late", 4, 5))
    rows[3].sort(key=lambda r: (r[0], r[2]))


def _event_out_of_order(rows: Rows) -> None:
    """Stream t0/a003's first event moved after the events of t0/a006."""
    row = next(r for r in rows[1] if r[:2] == ("t0/a003", 1))
    rows[1].remove(row)
    at = max(i for i, r in enumerate(rows[1]) if r[0] == "t0/a006") + 1
    rows[1].insert(at, row)


def _event_of_a_later_agent_early(rows: Rows) -> None:
    """Stream t0/a006's first event moved between the events of t0/a003."""
    row = next(r for r in rows[1] if r[:2] == ("t0/a006", 1))
    rows[1].remove(row)
    at = next(i for i, r in enumerate(rows[1]) if r[:2] == ("t0/a003", 2))
    rows[1].insert(at, row)


def _events_out_of_seq_order(rows: Rows) -> None:
    """Stream t1/a004's events 2 and 3 swapped."""
    at = next(i for i, r in enumerate(rows[1]) if r[:2] == ("t1/a004", 2))
    rows[1][at], rows[1][at + 1] = rows[1][at + 1], rows[1][at]


def _key_out_of_order(rows: Rows) -> None:
    """Stream t0/a000's idempotency record moved after those of t0/a003."""
    row = next(r for r in rows[3] if r[0] == "t0/a000")
    rows[3].remove(row)
    at = max(i for i, r in enumerate(rows[3]) if r[0] == "t0/a003") + 1
    rows[3].insert(at, row)


#: a section's rows out of order: refused naming the row (agent, seq) and where it was
ORDER = " the rows are out of order (each table in agent id order, then seq order"

EDITS: dict[str, tuple[Callable[[Rows], None], str]] = {
    "idempotency records of an agent without a head": (
        _keys_of_an_agent_without_head,
        "agent 't0/gone': the image holds its idempotency record from seq 1 but no head",
    ),
    "an idempotency record past a head": (
        _key_past_head,
        "agent 't1/a004': the image holds its idempotency record from seq 4 past its head seq 3",
    ),
    "an event out of agent order": (
        _event_out_of_order,
        "agent 't0/a003': the image holds its event seq 1 after the event seq 3 of agent"
        f" 't0/a006':{ORDER}",
    ),
    "an event of a later agent early": (
        _event_of_a_later_agent_early,
        "agent 't0/a003': the image holds its event seq 2 after the event seq 1 of agent"
        f" 't0/a006':{ORDER}",
    ),
    "events out of seq order": (
        _events_out_of_seq_order,
        "agent 't1/a004': its events are out of order: seq 3 where seq 2 was expected",
    ),
    "an idempotency record out of agent order": (
        _key_out_of_order,
        "agent 't0/a000': the image holds its idempotency record from seq 2 after the"
        f" idempotency record from seq 2 of agent 't0/a003':{ORDER}",
    ),
    "an event past a head": (
        _event_past_head,
        "agent 't1/a004': the image holds its event seq 4 past its head seq 3",
    ),
    "a snapshot past a head": (
        _snapshot_past_head,
        "agent 't2/a005': the image holds its snapshot seq 5 past its head seq 3",
    ),
    "events of an agent without a head row": (
        _agent_without_head,
        "agent 't0/a003': the image holds its event seq 1 but no head",
    ),
    "an event after the last head": (
        _event_after_the_last_head,
        "agent 'zz/late': the image holds its event seq 1 but no head",
    ),
}


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as url:
        yield url


@pytest.mark.parametrize("target", ["sqlite", "memory"])
@pytest.mark.parametrize("what", list(EDITS))
async def test_a_copy_with_rows_outside_its_streams_is_refused_and_nothing_restored(
    tmp_path: Path, pg_url: str, what: str, target: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(pg_url, keyring=keyring(), snapshot_every=2) as src:
        await fill(src, 12)
        await backup(src, file, bkey, chunk_bytes=2048)
    # the helper itself: sealed again unedited, the copy restores whole
    plain = resealed(file, bkey, tmp_path / "plain.skb", lambda rows: None)
    async with StateStore("memory://", keyring=keyring()) as fine:
        restored = await restore(fine, [plain], bkey)
        assert (restored.agents, restored.events) == (12, 36)
    edit, reason = EDITS[what]
    edited = resealed(file, bkey, tmp_path / "edited.skb", edit)
    url = "memory://" if target == "memory" else f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(url, keyring=keyring()) as dst:
        with pytest.raises(BackupCorrupt) as caught:
            await restore(dst, [edited], bkey)
        assert reason in str(caught.value)
        assert "nothing was restored" in str(caught.value)
        assert await dst.count_agents() == 0
        assert [a.agent_id async for a in dst.iter_agents()] == []
