"""A restore's ``started`` entry left open by a stopped run is taken over by the rerun
that finishes the restore, whether or not the stopped run wrote an agent.

Only a rerun that skipped agents already there (``--skip-existing``) looked for the
open entry: one stopped before its first agent (carrying the leases or the holds), or
one whose partly restored agents were deleted before the rerun (what a refused
``--skip-existing`` tells to do), found none there, wrote a second ``started`` entry
and finished that one. The first stayed open for good: ``audit verify`` listed "the
restore ... was not finished (run it again with --skip-existing)" after every rerun,
and running it again could not clear it. The stop is a ``BaseException`` (as a
Ctrl-C or a SIGKILL: the entry is not voided), raised in-process where the restore
goes no further."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url
from ._keyring import KEYRING
from ._restore_stopped import restore_module

POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
AGENTS = [f"acme/a{i}" for i in range(3)]


class Stopped(BaseException):
    """Stands for the kill: not an error, so the ``started`` entry is left open."""


def _governed(url: str) -> StateStore:
    return StateStore(url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit())


async def _target_and_backup(url: str, tmp_path: Path, key: BackupKey) -> Path:
    async with _governed(url) as target:
        await target.save("acme/own", {"n": 0})
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", keyring=KEYRING) as source:
        for agent in AGENTS:
            await source.save(agent, {"n": 1})
        await backup(source, tmp_path / "full.skb", key)
    return tmp_path / "full.skb"


async def _restores(url: str) -> list[tuple[int, str, dict[str, Any]]]:
    async with StateStore(url, keyring=KEYRING) as store:
        log = AuditLog(store.backend, KEYRING)
        return [(e.seq, e.outcome, e.detail) async for e in log.entries(operation="restore")]


async def _check_one_pair(url: str) -> None:
    entries = await _restores(url)
    assert [(o, d.get("finishes")) for _, o, d in entries] == [
        ("started", None),
        ("ok", entries[0][0]),
    ], entries
    async with StateStore(url, keyring=KEYRING) as store:
        report = await AuditLog(store.backend, KEYRING).verify()
        assert report.ok and report.unapplied == [], (report.problems, report.unapplied)
        assert sorted(a.agent_id for a in await store.list_agents()) == sorted(
            ["acme/own", *AGENTS]
        )


def _stopping(call: Callable[..., Awaitable[Any]], *, after: bool) -> Callable[..., Any]:
    async def stopped(*args: Any, **kwargs: Any) -> Any:
        if not after:
            raise Stopped
        done = await call(*args, **kwargs)
        if done is not None:  # (the image writer declines with None on some engines)
            raise Stopped
        return done

    return stopped


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "s3", "tiered"])
async def test_a_restore_stopped_before_its_first_agent_is_finished_by_its_rerun(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    with fresh_url(engine, tmp_path) as url:
        path = await _target_and_backup(url, tmp_path, key)
        with monkeypatch.context() as patch:  # stopped carrying the leases: no agent yet
            patch.setattr(
                restore_module,
                "carry_leases",
                _stopping(restore_module.carry_leases, after=False),
            )
            async with _governed(url) as target:
                with pytest.raises(Stopped):
                    await restore(target, [path], key)
        async with _governed(url) as target:
            assert (await restore(target, [path], key)).agents == len(AGENTS)
        await _check_one_pair(url)


async def test_a_rerun_after_the_partly_restored_agents_were_deleted_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    url = f"sqlite:///{tmp_path / 'dst.db'}"
    path = await _target_and_backup(url, tmp_path, key)
    with monkeypatch.context() as patch:  # stopped right after writing the agents
        for name in ("write_image", "_write_all"):
            patch.setattr(
                restore_module, name, _stopping(getattr(restore_module, name), after=True)
            )
        async with _governed(url) as target:
            with pytest.raises(Stopped):
                await restore(target, [path], key)
    async with _governed(url) as target:
        for agent in AGENTS:  # given up on: deleted, then restored from the start
            await target.delete(agent)
        assert (await restore(target, [path], key)).agents == len(AGENTS)
    await _check_one_pair(url)


async def test_a_rerun_that_fails_leaves_the_entry_it_took_over_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its writes, then run again and failing (an error of the engine):
    the rerun voided the killed run's entry, and ``audit verify`` no longer said the
    restore was not finished (nor would it for a restore still running when a second
    one of the same backups failed on its agents)."""
    key = BackupKey(os.urandom(32))
    url = f"sqlite:///{tmp_path / 'dst.db'}"
    path = await _target_and_backup(url, tmp_path, key)

    async def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the engine failed")

    with monkeypatch.context() as patch:
        patch.setattr(
            restore_module, "rebuild_whole", _stopping(restore_module.rebuild_whole, after=False)
        )
        async with _governed(url) as target:
            with pytest.raises(Stopped):
                await restore(target, [path], key)
    [(started, _, _)] = await _restores(url)
    with monkeypatch.context() as patch:
        patch.setattr(restore_module, "rebuild_whole", fails)
        async with _governed(url) as target:
            with pytest.raises(RuntimeError):
                await restore(target, [path], key, skip_existing=True)
    assert [(o, d.get("voids")) for _, o, d in await _restores(url)] == [("started", None)]
    async with StateStore(url, keyring=KEYRING) as store:
        report = await AuditLog(store.backend, KEYRING).verify()
        assert len(report.unapplied) == 1, report.unapplied
        assert f"entry {started}: the restore of" in report.unapplied[0]
    async with _governed(url) as target:  # and the rerun that works finishes it
        assert (await restore(target, [path], key, skip_existing=True)).skipped == len(AGENTS)
    await _check_one_pair(url)
