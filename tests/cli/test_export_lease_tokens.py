"""``statekeeper export`` carries each agent's newest fencing token (version 3 end
lines: ``"lease_token"``) and ``import`` raises the target's tokens to them before it
writes the agents (docs/concurrency.md, section 2).

Before, an imported agent's tokens started at 1 again: a worker fenced off at the
source under (holder "w1", token 1), resuming after a new "w1" took the imported agent
at token 1, wrote under that lease, with nothing said."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.concurrency import Lease, LeaseManager
from statekeeper.errors import ConfigurationError, LeaseLost

from ..backends._services import fresh_url


async def _leased(store: StateStore, agent: str, grants: int) -> Lease:
    """``grants`` leases of ``agent`` to "w1", each writing; the last one still held."""
    lease = None
    for n in range(grants):
        lease = await LeaseManager(store, holder="w1").acquire(agent, ttl=300)
        await store.save(agent, {"n": n}, lease=lease)
    assert lease is not None
    return lease


async def _export(store: StateStore) -> bytes:
    out = io.BytesIO()
    await export_agents(store, None, out)
    return out.getvalue()


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("source", ["memory", "sqlite", "postgresql", "redis"])
async def test_an_import_hands_out_tokens_above_the_sources(
    source: str, target: str, tmp_path: Path
) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "t").mkdir()
    with fresh_url(source, tmp_path / "s") as url, fresh_url(target, tmp_path / "t") as into:
        async with StateStore(url) as store:
            stale = await _leased(store, "a", 3)
            await (await _leased(store, "b", 2)).release()
            await store.save("c", {"n": 0})  # never leased
            exported = await _export(store)
        lines = [json.loads(x) for x in exported.splitlines()]
        assert lines[0]["version"] == 3
        ends = {x["end"]: x.get("lease_token") for x in lines if "end" in x}
        assert ends == {"a": 3, "b": 2, "c": None}
        async with StateStore(into) as store:
            await store.save("other", {"n": 0})  # (a store)
        assert await import_agents(into, io.BytesIO(exported)) == (3, 6, [])
        async with StateStore(into) as store:
            carried = await store.backend.get_lease("a")
            assert carried is not None and (carried.holder, carried.token) == (None, 3)
            fresh = await LeaseManager(store, holder="w1").acquire("a", ttl=300)
            assert fresh.token == 4
            with pytest.raises(LeaseLost):  # the paused worker's write is refused
                await store.save("a", {"n": "stale"}, lease=stale)
            await store.save("a", {"n": "fresh"}, lease=fresh)
            assert (await LeaseManager(store, holder="x").acquire("b", ttl=300)).token == 3
            assert (await LeaseManager(store, holder="x").acquire("c", ttl=300)).token == 1


async def test_skip_existing_carries_the_imported_agents_tokens_only(tmp_path: Path) -> None:
    """An agent the target keeps keeps its own lease (not revoked by a file it did not
    take); the others get the source's tokens; a token the target passed stays."""
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await _leased(store, "a", 2)
        await _leased(store, "b", 5)
        await _leased(store, "c", 4)
        exported = await _export(store)
    into = f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(into) as store:
        kept = await _leased(store, "b", 1)  # the target's own "b", held at token 1
        await store.backend.carry_lease_tokens([("c", 9)])  # beyond the file's 4
    assert await import_agents(into, io.BytesIO(exported), skip_existing=True) == (2, 6, ["b"])
    async with StateStore(into) as store:
        assert (await LeaseManager(store, holder="x").acquire("a", ttl=300)).token == 3
        assert (await LeaseManager(store, holder="x").acquire("c", ttl=300)).token == 10
        await store.save("b", {"n": "still mine"}, lease=kept)


async def test_a_file_without_tokens_still_imports(tmp_path: Path) -> None:
    """A version-2 file (written before tokens were carried): imported as before, the
    target's tokens starting at 1."""
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await _leased(store, "a", 3)
        lines = [json.loads(x) for x in (await _export(store)).splitlines()]
    old = [{**lines[0], "version": 2}]
    old += [{k: v for k, v in x.items() if k != "lease_token"} for x in lines[1:-1]]
    # (the completion line's digest is of the lines as they were: left out, as version
    # 2 files written before it have none)
    old.append({"complete": {k: v for k, v in lines[-1]["complete"].items() if k != "sha256"}})
    into = f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(into) as store:
        await store.save("other", {"n": 0})
    text = "".join(json.dumps(x) + "\n" for x in old).encode()
    assert await import_agents(into, io.BytesIO(text)) == (1, 3, [])
    async with StateStore(into) as store:
        assert await store.backend.get_lease("a") is None
        assert (await LeaseManager(store, holder="x").acquire("a", ttl=300)).token == 1


@pytest.mark.parametrize("token", [0, -1, "7", 1.5, True, None])
async def test_a_lease_token_that_is_not_one_is_refused(token: object, tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await _leased(store, "a", 1)
        lines = [json.loads(x) for x in (await _export(store)).splitlines()]
    edited = [{**x, "lease_token": token} if "end" in x else x for x in lines]
    edited[-1] = {"complete": {k: v for k, v in lines[-1]["complete"].items() if k != "sha256"}}
    into = f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(into) as store:
        await store.save("other", {"n": 0})
    text = "".join(json.dumps(x) + "\n" for x in edited).encode()
    with pytest.raises(ConfigurationError, match=r"lease_token .* is not a fencing token"):
        await import_agents(into, io.BytesIO(text))
    async with StateStore(into) as store:
        assert await store.head("a") == 0  # nothing imported
