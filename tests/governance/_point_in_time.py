"""What the point-in-time backup tests share (``test_backup_file.py``: the table-copy
path, ``test_backup_pages.py``: the page image): the writes another writer commits
while a backup of a store filled with ``fill(src, 12)`` runs, and the check that the
backup holds the store as it was when the backup began."""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, BackupResult, restore
from statekeeper.governance.backup.fileformat import FrameReader

STORE_KEY = bytes(range(32))


def keyring() -> Keyring:
    return Keyring({"k1": STORE_KEY})


async def write_during(src: StateStore) -> None:
    """Appends, a new agent and a delete, committed while the copy is being taken."""
    await src.save("t0/a000", {"after": 1})
    await src.save("t0/a000", {"after": 2})
    await src.save("late/agent", {"new": True})
    await src.delete("t1/a001")


async def write_before_heads(src: StateStore) -> None:
    """More writes, committed after the copy and before its heads are read."""
    await src.save("t2/a002", {"after": 1})
    await src.save("later/agent", {"new": True})


async def check_as_it_began(
    src: StateStore,
    result: BackupResult,
    file: Path,
    key: BackupKey,
    before: dict[str, int],
    tmp_path: Path,
) -> None:
    """Both rounds of writes landed in ``src``; the backup, its manifest's heads and a
    restore of it hold the store as it was (``before``)."""
    assert await src.head("t0/a000") == 5 and await src.head("t1/a001") == 0
    assert await src.head("t2/a002") == 4
    assert result.agents == 12 and result.events == 36
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [file], key)
        assert {a.agent_id: a.head_seq async for a in dst.iter_agents()} == before
        assert (await dst.load("t0/a000")).data == {"i": 0, "j": 2}
        assert (await dst.load("t1/a001")).data == {"i": 1, "j": 2}
        assert (await dst.load("t2/a002")).data == {"i": 2, "j": 2}
    reader = FrameReader(file, key)
    try:
        assert {a: h for a, h, _ in reader.heads()} == before
    finally:
        reader.close()
