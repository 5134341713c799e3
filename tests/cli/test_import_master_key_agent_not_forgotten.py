"""``import`` of an export does not pass over an agent the source store holds under the
master key alone because another store of the key vault forgot the same id.

``import`` passes over an agent forgotten in the store the file was exported from (its
key family); since ``Keyring.forgotten_in(held=True)`` it counts the agent forgotten
there when that store has no key of it and every key of it in the vault is destroyed
(a copy restored before copies adopted their keys). A store whose records of the agent
use no data key at all (written before ``"data_keys"`` was added to the key file) has
no key of it either: after another store's ``forget`` of its own ``u1``, an export of
this store's ``u1`` (alive, readable) was passed over as forgotten. The export now says
of such an agent that its records use no data key (``"data_key": false`` on its end
line), and ``import`` does not count it forgotten by another store's tombstones."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.shredding import forget
from tests.keyfiles import write_key_file

K1 = bytes(range(32))


async def test_an_agent_sealed_before_the_vault_is_imported(tmp_path: Path) -> None:
    from statekeeper.cli.transfer import export_agents, import_agents

    key_file = tmp_path / "keys.json"
    material = base64.b64encode(K1).decode()
    write_key_file(key_file, {"active": "k1", "keys": {"k1": material}, "data_keys": "v.db"})
    a_url, c_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    e_url = f"sqlite:///{tmp_path / 'e.db'}"
    async with StateStore(a_url, keyring=Keyring({"k1": K1}, active="k1")) as a:
        await a.save("u1", {"n": 1})  # before the vault: under the master key alone
    keys = Keyring.from_file(key_file)
    async with StateStore(c_url, keyring=keys) as c:
        await c.save("u1", {"someone": "else"})  # C's own u1
        assert (await forget(c, "u1")).destroyed
    async with StateStore(a_url, keyring=keys) as a:
        await a.save("u2", {"n": 2})  # under a data key of A's own
        assert (await a.load("u1")).data == {"n": 1}
        exported = io.BytesIO()
        await export_agents(a, None, exported)
    async with StateStore(e_url, keyring=keys) as e:
        await e.save("other", {})  # (import refuses to create a store)
    forgotten: list[str] = []
    exported.seek(0)
    agents, _, _ = await import_agents(e_url, exported, key_file=key_file, forgotten=forgotten)
    assert (agents, forgotten) == (2, [])  # was: (1, ["u1"]), u1 passed over
    async with StateStore(e_url, keyring=keys) as e:
        assert (await e.load("u1")).data == {"n": 1}
        assert (await e.load("u2")).data == {"n": 2}
