"""An import into an encrypted store opened without its key is refused before it
writes anything: not the file's legal holds, not the source's fencing tokens.

Before, ``import`` placed the holds and raised the lease tokens first and checked the
key only when it came to the agents: the refused import left holds (and raised
tokens) in the target, though it said nothing was imported."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import KeyRequired
from statekeeper.governance.holds import add_hold, list_holds
from statekeeper.security import Keyring

from ._proc import sk_in_process


@pytest.mark.parametrize("held", [False, True])
async def test_a_refused_keyless_import_writes_no_hold_and_no_token(
    held: bool, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    keyring = Keyring.from_file(keys)
    source = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(source) as store:
        for n in range(3):
            lease = await LeaseManager(store, holder="w1").acquire("a", ttl=300)
            await store.save("a", {"n": n}, lease=lease)
        if held:
            await add_hold(store, "a", "Smith v. Acme")
        out = io.BytesIO()
        await export_agents(store, None, out)
    target = f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(target, keyring=keyring) as store:
        await store.save("other", {"n": 1})  # (an encrypted store)
    with pytest.raises(KeyRequired):
        await import_agents(target, io.BytesIO(out.getvalue()))
    async with StateStore(target, keyring=keyring) as store:
        assert await list_holds(store) == ()
        assert await store.head("a") == 0
        lease = await LeaseManager(store, holder="w2").acquire("a", ttl=300)
        assert lease.token == 1  # (the source's tokens were not carried)
