"""``forget`` cannot commit with its audit entry: the data key it destroys lives in the
key vault, a database of its own by design (a backup of the store must not carry the
keys that open it). So it stays entry first, and ``audit verify`` checks each forget
against the vault: a forgetting process SIGKILLed between its entry and the key's
destruction leaves an entry ``verify`` reports as not applied (was: counted as not
checkable, so passed), and ``forget`` run again finishes it, after which verify is
clean (real child process, real SIGKILL, at the vault's ``destroy``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.shredding import forget
from statekeeper.security import Keyring

from ..backends._services import fresh_url

MASTER = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
POLICY = '[principals.ops]\nadmin = ["**"]\n'

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from statekeeper import StateStore
    from statekeeper.codec.datakeys import SqliteKeyVault
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.governance.shredding import forget
    from statekeeper.security import Keyring

    url, vault_path, master, policy = sys.argv[1:5]

    class Dying(SqliteKeyVault):
        # the entry is written: die before any key goes (the store's family key, or
        # the legacy id-only one, whichever forget destroys first)
        def destroy(self, agent_id, at):
            os.kill(os.getpid(), signal.SIGKILL)

        def destroy_in(self, family, agent_id, at):
            os.kill(os.getpid(), signal.SIGKILL)

    async def main() -> None:
        keys = Keyring({"k1": master}, data_keys=Dying(vault_path))
        async with StateStore(url, keyring=keys, principal="ops",
                              policy=parse_policy(policy), audit=Audit(), witness=False) as store:
            await forget(store, "acme/f")
        print("finished", flush=True)

    asyncio.run(main())
    """
)


def _keys(vault: Path) -> Keyring:
    return Keyring({"k1": MASTER}, data_keys=vault)


def _store(url: str, vault: Path) -> StateStore:
    return StateStore(
        url,
        keyring=_keys(vault),
        principal="ops",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_forget_killed_before_the_key_goes_is_reported_then_finished(
    tmp_path: Path, engine: str
) -> None:
    vault = tmp_path / "vault.db"
    with fresh_url(engine, tmp_path) as url:

        async def seed() -> None:
            async with _store(url, vault) as store:
                await store.save("acme/f", {"n": 1})
                await store.save("acme/g", {"n": 1})

        asyncio.run(seed())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        child = subprocess.run(
            [sys.executable, "-c", CHILD, url, str(vault), MASTER, POLICY],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, (child.stdout, child.stderr)

        async def after() -> None:
            async with _store(url, vault) as store:
                log = AuditLog(store.backend, _keys(vault))
                report = await log.verify()
                assert report.ok, report.problems  # the log itself is whole
                (line,) = report.unapplied
                assert line.endswith(
                    "the forget of 'acme/f' it records was not applied (its data key is "
                    "still in the key vault: the process stopped between the entry and the "
                    "key's destruction; run `statekeeper forget` on it again)"
                ), line
                assert (await store.load("acme/f")).data == {"n": 1}  # not forgotten yet
                done = await forget(store, "acme/f")  # run again: finished
                assert done.destroyed
                report = await log.verify()
                assert report.ok and not report.unapplied, report
                assert "forget" not in report.unchecked

        asyncio.run(after())


async def test_a_forget_is_checked_against_the_vault(tmp_path: Path) -> None:
    """(not killed) a forget's entry and the vault's tombstone agree: verify is clean,
    nothing counted as not checkable; a log sealed with a keyring without the vault
    counts it instead."""
    vault = tmp_path / "vault.db"
    with fresh_url("sqlite", tmp_path) as url:
        async with _store(url, vault) as store:
            await store.save("acme/f", {"n": 1})
            await forget(store, "acme/f")
            report = await AuditLog(store.backend, _keys(vault)).verify()
            assert report.ok and not report.unapplied and report.unchecked == {}, report
    # a log sealed with a keyring of its own, without a vault: counted, not passed
    own = Keyring({"a1": bytes(range(1, 33))})
    with fresh_url("sqlite", tmp_path / "own") as url:
        async with StateStore(
            url,
            keyring=_keys(tmp_path / "own-vault.db"),
            principal="ops",
            policy=parse_policy(POLICY),
            audit=Audit(keyring=own),
            witness=False,
        ) as store:
            await store.save("acme/f", {"n": 1})
            await forget(store, "acme/f")
            report = await AuditLog(store.backend, own).verify()
            assert report.ok and not report.unapplied and report.unchecked == {"forget": 1}
