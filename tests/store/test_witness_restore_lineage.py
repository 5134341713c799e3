"""A restore renews the store's id, and a witness file of the id it had is still this
store's (:mod:`statekeeper.security.witness_store`, lineage).

Before: the CLI's ``statekeeper restore`` (which does not know the application's
``witness=PATH``) renewed the id of a PostgreSQL or Redis store, and the application's
next opening raised ``WitnessStoreMismatch`` — a legitimate restore made the app refuse
to start; a restore stopped between the renewal and the file's did the same at every
opening, a retried restore included; and a process that cached the id before another
process's restore said, in its alarms, that the file was another store's witness.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected, WitnessStoreMismatch
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)

KEY = BackupKey(b"k" * 32)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.db'}"
    elif request.param == "postgres":
        require_postgres()
        schema = namespace(tmp_path, "sk_wrl_")
        yield f"{POSTGRES_DSN}?schema={schema}"
        drop_schema(schema)
    else:
        require_redis()
        prefix = namespace(tmp_path, "sk_wrl_")
        yield f"{REDIS_URL}?prefix={prefix}"
        delete_prefix(prefix)


async def _backup_of_another_agent(tmp_path: Path) -> Path:
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", witness=False) as source:
        await source.save("restored", {"n": 1})
        await backup(source, tmp_path / "b.skb", KEY)
    return tmp_path / "b.skb"


def _filed(witness: Path) -> str:
    return str(json.loads(witness.read_text())["store"]["id"])


async def test_a_restore_that_does_not_know_the_apps_witness_keeps_it(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness) as app:
        await app.save("mine", {"n": 1})
        before = await app.backend.feed_id()
    assert _filed(witness) == before
    # the CLI's restore: the application's witness=PATH unknown to it
    async with StateStore(url, witness=False) as cli:
        await restore(cli, [await _backup_of_another_agent(tmp_path)], KEY)
        after = await cli.backend.feed_id()
    assert after != before
    async with StateStore(url, witness=witness) as app:  # was: WitnessStoreMismatch
        assert (await app.load("mine")).data == {"n": 1}
        assert (await app.load("restored")).data == {"n": 1}
        await app.save("mine", {"n": 2})
        assert not (await app.verify()).problems
    assert _filed(witness) == after
    assert "before a restore renewed its id" in caplog.text


async def test_a_taken_over_witness_still_catches_a_rollback(url: str, tmp_path: Path) -> None:
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness) as app:
        await app.save("mine", {"n": 1})
    async with StateStore(url, witness=False) as cli:
        await restore(cli, [await _backup_of_another_agent(tmp_path)], KEY)
        await cli.delete("mine")  # lost behind the witness's back
    async with StateStore(url, witness=witness) as app:
        with pytest.raises(RollbackDetected) as caught:
            await app.load("mine")
        assert not isinstance(caught.value, WitnessStoreMismatch)
        assert "another store" not in str(caught.value)


async def test_a_witness_of_a_store_never_this_one_still_raises(tmp_path: Path) -> None:
    witness = tmp_path / "shared.sk-witness"
    async with StateStore(f"sqlite:///{tmp_path / 'x.db'}", witness=witness) as x:
        await x.save("a", {"n": 1})
        await x.delete("a")
    y_url = f"sqlite:///{tmp_path / 'y.db'}"
    async with StateStore(y_url, witness=False) as y:
        await y.save("b", {"n": 1})
        await restore(y, [await _backup_of_another_agent(tmp_path)], KEY)  # y's id renewed
    async with StateStore(y_url, witness=witness) as y:
        with pytest.raises(WitnessStoreMismatch, match=r"x\.db"):
            await y.load("b")


_STOPPED = """
import asyncio, os, signal, sys
from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, restore
from statekeeper.governance.backup import restoretarget

async def stop(*args, **kwargs):  # between the id's renewal and the witness file's
    os.kill(os.getpid(), signal.SIGKILL)

restoretarget.renewed = stop

async def main():
    async with StateStore(sys.argv[1]) as store:
        await restore(store, [sys.argv[2]], BackupKey(b"k" * 32))

asyncio.run(main())
"""


async def test_a_restore_stopped_between_the_renewals_leaves_a_store_that_opens(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    async with StateStore(f"sqlite:///{db}") as app:
        await app.save("mine", {"n": 1})
    witness = Path(f"{db}.sk-witness")
    before = _filed(witness)
    path = await _backup_of_another_agent(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _STOPPED, f"sqlite:///{db}", str(path)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr.decode()
    assert _filed(witness) == before  # the file still names the id the store had
    async with StateStore(f"sqlite:///{db}") as app:  # was: WitnessStoreMismatch
        assert (await app.load("mine")).data == {"n": 1}
        assert await app.backend.feed_id() != before
        await restore(app, [path], KEY, skip_existing=True)  # the retry
        assert (await app.load("restored")).data == {"n": 1}
        assert not (await app.verify()).problems


async def test_an_alarm_after_another_processs_restore_names_this_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    async with StateStore(f"sqlite:///{db}") as first:
        await first.save("mine", {"n": 1})
        assert first.witness is not None
        await first.witness.flush()
        cached = first.witness.store
        async with StateStore(f"sqlite:///{db}") as second:  # another process's restore
            await restore(second, [await _backup_of_another_agent(tmp_path)], KEY)
        async with StateStore(f"sqlite:///{db}", witness=False) as behind:
            await behind.delete("mine")  # lost behind the witness's back
        found = await first.witness.check(first)
        assert [p.agent_id for p in found] == ["mine"]
        assert "another store" not in str(found[0])
        now = await first.backend.feed_id()
        assert cached is not None and cached["id"] != now
        assert f"store id {now}" in str(found[0])
        filed = await first.witness.check_filed(first, "mine")
        assert filed is not None and "another store" not in str(filed)


async def test_a_cold_read_after_another_processs_restore_names_this_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    async with StateStore(f"sqlite:///{db}", cache_size=0) as first:
        await first.save("mine", {"n": 1})
        await first.save("mine", {"n": 2})
        assert first.witness is not None
        await first.witness.flush()
        async with StateStore(f"sqlite:///{db}") as second:  # another process's restore
            await restore(second, [await _backup_of_another_agent(tmp_path)], KEY)
        async with StateStore(f"sqlite:///{db}", witness=False) as behind:
            await behind.delete("mine")
            for n in range(3):  # written again: another record at the marked seq
                await behind.save("mine", {"n": -n})
        with pytest.raises(RollbackDetected) as caught:
            await first.load("mine")  # read from storage: the mark checked
        assert "another store" not in str(caught.value)
        assert f"store id {await first.backend.feed_id()}" in str(caught.value)
