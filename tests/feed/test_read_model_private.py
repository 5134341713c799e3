"""The read models of an encrypted store hold what its records hide (each agent's
state machine state, tool names, a user projection's copy of the data), decrypted:
the read-model file was created with the umask's mode (0644: every local user could
read it) while an export of the same store is made 0600. A read model of an encrypted
store is created its owner's only (its -wal and -shm follow the file's mode); one of a
store without a key keeps the umask's mode."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.feed import ProjectionRunner
from statekeeper.security import Keyring, generate_key

STATE = "triaging-Kq83Zt"


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(path: Path) -> dict[str, int]:
    found = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in found if p.exists()}


async def _run(url: str, keyring: Keyring | None, read_model: Path) -> None:
    async with StateStore(url, keyring=keyring) as store:
        await store.save("a", {"n": 1}, fsm_state=STATE)
        async with ProjectionRunner(store, read_model) as runner:
            await runner.catch_up()
            assert await runner.query("SELECT state FROM agent_states") == [(STATE,)]
            modes = _modes(read_model)
    assert read_model.name in modes and f"{read_model.name}-wal" in modes, modes
    private = keyring is not None
    for name, mode in modes.items():
        assert (mode & 0o077 == 0) if private else (mode == 0o644), (name, oct(mode))


def test_a_read_model_of_an_encrypted_store_is_its_owners_only(
    tmp_path: Path, umask_022: None
) -> None:
    keyring = Keyring({"k1": generate_key()}, active="k1")
    asyncio.run(_run(f"sqlite:///{tmp_path / 's.db'}", keyring, tmp_path / "s.projections.db"))


def test_a_read_model_of_a_store_without_a_key_keeps_the_umask(
    tmp_path: Path, umask_022: None
) -> None:
    asyncio.run(_run(f"sqlite:///{tmp_path / 's.db'}", None, tmp_path / "s.projections.db"))


def test_projections_run_on_the_command_line(tmp_path: Path, umask_022: None) -> None:
    from tests.cli._proc import cli_env, run_in_process
    from tests.keyfiles import write_key_file

    key_file = tmp_path / "keys.json"
    write_key_file(key_file, {"active": "k1", "keys": {"k1": generate_key()}})

    async def seed() -> None:
        async with StateStore(
            f"sqlite:///{tmp_path / 's.db'}", keyring=Keyring.from_file(key_file)
        ) as store:
            await store.save("a", {"n": 1}, fsm_state=STATE)

    asyncio.run(seed())
    args = ("projections", "run", "--db", str(tmp_path / "s.db"), "--key-file", str(key_file))
    code, _out, err = run_in_process(args, cli_env(200))
    assert code == 0, err
    modes = _modes(tmp_path / "s.projections.db")
    assert modes and all(mode & 0o077 == 0 for mode in modes.values()), modes
