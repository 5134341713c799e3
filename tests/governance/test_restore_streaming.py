"""A restore streams its backups: memory is about one chunk, not the backup's size;
and a chain whose later parts carry an older snapshot restores it exactly."""

from __future__ import annotations

import base64
import os
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.records import AppendRequest

KEYS = Keyring({"k1": bytes(range(32))})
#: WRITE_BATCH_BYTES (governance/backup/writepass.py): what the writing pass holds of
#: records at once
BATCH_BYTES = 256 << 10


async def test_restore_memory_is_bounded_by_a_chunk_not_the_backup(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    blob_bytes = 48 << 10
    agents = 100
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=KEYS) as src:
        for i in range(agents):  # incompressible: ~4.8 MB of records in the backup
            blob = base64.b64encode(os.urandom(blob_bytes)).decode()
            await src.save(f"t/a{i:03d}", {"blob": blob})
        await backup(src, file, bkey, chunk_bytes=128 << 10)
    assert file.stat().st_size > agents * blob_bytes
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=KEYS) as dst:
        tracemalloc.start()
        try:
            result = await restore(dst, [file], bkey)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.agents == agents
        assert (await dst.verify()).ok
        # holding the backup (as restores did) peaks above its size; streamed, a few
        # chunks: 0.140-0.144 of it over 20 runs (a whole 1 MiB group at once: 0.21-0.36)
        assert peak < file.stat().st_size / 5, (peak, file.stat().st_size)


async def test_restore_appends_at_most_a_batch_of_records_at_once(tmp_path: Path) -> None:
    """The writing pass holds one batch of a group (WRITE_BATCH_BYTES), not the group
    (a file backup's group is 1 MiB): the payload bytes of appends under way at once
    stay under the batch plus one record, counted at the real SQLite backend."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=KEYS) as src:
        for i in range(40):  # ~64 KiB records: a group of ~16 of them
            await src.save(f"t/a{i:03d}", {"blob": base64.b64encode(os.urandom(48 << 10)).decode()})
        await backup(src, file, bkey, chunk_bytes=128 << 10)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=KEYS) as dst:
        append = dst.backend.append
        under_way = most = record = 0

        async def counted(request: AppendRequest) -> Any:
            nonlocal under_way, most, record
            size = sum(len(e.payload) for e in request.events)
            record = max(record, size)
            under_way += size
            most = max(most, under_way)
            try:
                return await append(request)
            finally:
                under_way -= size

        append_batch = dst.backend.append_batch

        async def counted_batch(requests: Sequence[AppendRequest]) -> Any:
            # the writing pass's appends go to the engine's batch (one commit each)
            nonlocal under_way, most, record
            sizes = [sum(len(e.payload) for e in r.events) for r in requests]
            record = max([record, *sizes])
            under_way += sum(sizes)
            most = max(most, under_way)
            try:
                return await append_batch(requests)
            finally:
                under_way -= sum(sizes)

        async def no_bulk_copy(
            image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
        ) -> bool:
            return False  # the record path: what an engine without a bulk copy gets

        dst.backend.append = counted  # type: ignore[method-assign]
        dst.backend.append_batch = counted_batch  # type: ignore[method-assign]
        dst.backend.import_image = no_bulk_copy  # type: ignore[method-assign]
        result = await restore(dst, [file], bkey)
        assert result.agents == 40
        assert (await dst.verify()).ok
    assert 0 < most <= BATCH_BYTES + record, (most, record)


async def test_a_chain_whose_snapshot_predates_the_increment(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=KEYS, snapshot_every=4) as src:
        for j in range(5):
            await src.save("t/a", {"j": j})  # a snapshot at seq 4
        await backup(src, full, bkey)
        await src.save("t/a", {"j": 5})  # seq 6: the increment, its snapshot still at 4
        await src.save("t/b", {"new": True})
        await backup(src, inc, bkey, since=full)
        expected = [e.seq async for e in src.history("t/a")]
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=KEYS) as dst:
        result = await restore(dst, [full, inc], bkey)
        assert result.agents == 2 and result.snapshots >= 1
        assert (await dst.verify()).ok
        assert (await dst.load("t/a")).data == {"j": 5}
        assert (await dst.load("t/a", at_seq=4)).data == {"j": 3}
        assert [e.seq async for e in dst.history("t/a")] == expected
        assert (await dst.backend.latest_snapshot("t/a")) is not None
