"""A rekey progress file resumes only the run it records: another store's file, or
this store's file after the store was replaced by a copy from before the run, is
refused (resuming would skip agents whose records stay under the old key)."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.errors import ConfigurationError, ProgressOfAnotherRun
from statekeeper.security import Keyring, RekeyProgress, generate_key, rekey

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")


async def _fill(path: Path, agents: int = 8) -> None:
    async with StateStore(f"sqlite:///{path}", keyring=OLD) as store:
        for a in range(agents):
            for i in range(4):
                await store.save(f"agent-{a:02d}", {"n": i})


def _copy(src: Path, dst: Path) -> None:
    with closing(sqlite3.connect(src)) as conn:  # (the WAL folded into the file first)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for leftover in (dst, Path(f"{dst}-wal"), Path(f"{dst}-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(src, dst)


def _key_ids(path: Path) -> set[str | None]:
    with closing(sqlite3.connect(path)) as conn:
        payloads = [r[0] for r in conn.execute("SELECT payload FROM sk_events")]
    return {Codec.header(p).key_id for p in payloads}  # type: ignore[union-attr]


async def _interrupted(path: Path, progress: Path, after: int = 3) -> None:
    seen: list[str] = []

    def stop(agent_id: str, *_: object) -> None:
        seen.append(agent_id)
        if len(seen) == after:
            raise KeyboardInterrupt

    async with StateStore(f"sqlite:///{path}", keyring=BOTH) as store:
        with pytest.raises(KeyboardInterrupt):
            await rekey(store, progress_file=progress, on_agent=stop)


async def test_the_progress_file_of_another_store_is_refused(tmp_path: Path) -> None:
    a, b, progress = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "rk.json"
    await _fill(a)
    _copy(a, b)
    await _interrupted(a, progress)
    saved = RekeyProgress.load(progress)
    assert saved is not None and saved.store == f"sqlite:{a.resolve()}"
    async with StateStore(f"sqlite:///{b}", keyring=BOTH) as store:
        with pytest.raises(ProgressOfAnotherRun) as info:
            await rekey(store, progress_file=progress)
    assert isinstance(info.value, ConfigurationError)
    assert str(a.resolve()) in str(info.value) and str(b.resolve()) in str(info.value)
    assert _key_ids(b) == {"k1"}  # nothing done
    assert RekeyProgress.load(progress) == saved  # the file is a's still
    # its own store resumes from it
    async with StateStore(f"sqlite:///{a}", keyring=BOTH) as store:
        stats = await rekey(store, progress_file=progress)
    assert stats.agents == 5 and _key_ids(a) == {"k2"}


async def test_a_store_replaced_by_an_older_copy_is_refused(tmp_path: Path) -> None:
    db, before, progress = tmp_path / "s.db", tmp_path / "before.db", tmp_path / "rk.json"
    await _fill(db)
    _copy(db, before)
    await _interrupted(db, progress)
    _copy(before, db)  # a restore of the store as it was before the run
    async with StateStore(f"sqlite:///{db}", keyring=BOTH) as store:
        with pytest.raises(ProgressOfAnotherRun, match="agent-02"):
            await rekey(store, progress_file=progress)
    progress.unlink()  # as the error says: start over
    async with StateStore(f"sqlite:///{db}", keyring=BOTH) as store:
        stats = await rekey(store, progress_file=progress)
    assert stats.agents == 8 and _key_ids(db) == {"k2"}
