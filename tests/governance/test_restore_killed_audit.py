"""A restore killed in its writing pass left the streams it wrote with no ``restore``
entry: the entry was written after the last write. ``audit verify`` then named the
restored events as written without the audit log, and the rerun that finished the
restore (``--skip-existing``) recorded a restore of 0 agents. A restore into a store
that keeps an audit log is now entry first, as every mutation that cannot share a
commit with its entry: a ``started`` entry before the first write, an ``ok`` entry
naming it when done. Killed (a real child process, SIGKILLed by itself right after
the agents were written) and run again, it leaves that one pair; until the rerun,
verify lists the restore as not finished and nothing as written without the log."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url
from ._keyring import KEYRING

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
AGENTS = [f"acme/a{i}" for i in range(4)]

CHILD = textwrap.dedent(
    """
    import asyncio, importlib, os, signal, sys
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.governance.backup import BackupKey, restore
    from tests.governance._keyring import KEYRING

    url, path, key = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
    module = importlib.import_module("statekeeper.governance.backup.restore")

    def killed_after(write):
        async def wrote(*args, **kwargs):
            written = await write(*args, **kwargs)
            if written is not None:  # the agents are written: die before anything else
                os.kill(os.getpid(), signal.SIGKILL)
            return written
        return wrote

    for name in ("write_image", "_write_all"):
        setattr(module, name, killed_after(getattr(module, name)))

    async def main():
        policy = parse_policy('[principals.ops]\\nadmin = ["**"]\\n')
        store = StateStore(url, keyring=KEYRING, principal="ops", policy=policy, audit=Audit())
        await restore(store, [path], BackupKey(key))

    asyncio.run(main())
    """
)


def _governed(url: str) -> StateStore:
    return StateStore(url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit())


async def _restores(url: str) -> list[tuple[int, str, dict[str, Any]]]:
    async with StateStore(url, keyring=KEYRING) as store:
        log = AuditLog(store.backend, KEYRING)
        return [(e.seq, e.outcome, e.detail) async for e in log.entries(operation="restore")]


async def _verified(url: str) -> Any:
    async with StateStore(url, keyring=KEYRING) as store:
        return await AuditLog(store.backend, KEYRING).verify()


async def _target_then_backup(url: str, tmp_path: Path, key: BackupKey) -> Path:
    """A governed target whose log begins before the backup's events were written."""
    async with _governed(url) as target:
        await target.save("acme/own", {"n": 0})
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", keyring=KEYRING) as source:
        for n in range(3):
            for agent in AGENTS:
                await source.save(agent, {"n": n})
        await backup(source, tmp_path / "full.skb", key)
    return tmp_path / "full.skb"


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_killed_restore_and_its_rerun_leave_one_started_ok_pair(
    tmp_path: Path, engine: str
) -> None:
    raw = os.urandom(32)
    key = BackupKey(raw)
    (tmp_path / "dst").mkdir()
    with fresh_url(engine, tmp_path / "dst") as url:
        path = asyncio.run(_target_then_backup(url, tmp_path, key))
        script = tmp_path / "restorer.py"
        script.write_text(CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        child = subprocess.run(
            [sys.executable, str(script), url, str(path), raw.hex()],
            capture_output=True,
            text=True,
            env=env,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr

        # killed: the agents are there, under an entry written before them
        [(started, outcome, detail)] = asyncio.run(_restores(url))
        assert (outcome, detail["agents"], len(detail["backups"])) == ("started", 4, 1)
        report = asyncio.run(_verified(url))
        assert report.ok, report.problems  # nothing written without the log
        assert len(report.unapplied) == 1, report.unapplied
        assert f"entry {started}: the restore of" in report.unapplied[0]
        assert "was not finished" in report.unapplied[0]

        async def rerun() -> None:
            async with _governed(url) as target:
                done = await restore(target, [path], key, skip_existing=True)
                assert (done.agents, done.skipped) == (0, 4)

        asyncio.run(rerun())
        entries = asyncio.run(_restores(url))
        assert [(o, d.get("finishes")) for _, o, d in entries] == [
            ("started", None),
            ("ok", started),
        ], entries
        report = asyncio.run(_verified(url))
        assert report.ok and report.unapplied == [], (report.problems, report.unapplied)


async def test_a_restore_not_stopped_writes_the_same_pair(tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    url = f"sqlite:///{tmp_path / 'dst.db'}"
    path = await _target_then_backup(url, tmp_path, key)
    async with _governed(url) as target:
        assert (await restore(target, [path], key)).agents == 4
    entries = await _restores(url)
    assert [(o, d.get("finishes"), d["agents"]) for _, o, d in entries] == [
        ("started", None, 4),
        ("ok", entries[0][0], 4),
    ]
    report = await _verified(url)
    assert report.ok and report.unapplied == [], (report.problems, report.unapplied)


async def test_a_restore_that_fails_voids_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ._restore_stopped import Killed, restore_module

    key = BackupKey(os.urandom(32))
    url = f"sqlite:///{tmp_path / 'dst.db'}"
    path = await _target_then_backup(url, tmp_path, key)

    async def fails(*args: Any, **kwargs: Any) -> Any:
        raise Killed("the engine failed")

    with monkeypatch.context() as patch:
        patch.setattr(restore_module, "write_image", fails)
        async with _governed(url) as target:
            with pytest.raises(Killed):
                await restore(target, [path], key)
    entries = await _restores(url)
    assert [(o, d.get("voids")) for _, o, d in entries] == [
        ("started", None),
        ("error:Killed", entries[0][0]),
    ]
    assert (await _verified(url)).unapplied == []
