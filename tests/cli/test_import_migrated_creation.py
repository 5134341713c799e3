"""An agent migrated (by rewrite) while its head was its creation event exports a
``created`` event whose JSON Patch holds the upcast after the creation's replace. The
import refused the whole file ("the first event of 's-1' is not a creation"): no
export of a store migrated that way could be imported. It imports and verifies now,
every event as the file gives it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from tests.cli._proc import sk_in_process
from tests.schema import apps


async def _migrated_store(url: str) -> dict[str, apps.SupportV2]:
    async with StateStore(url) as store:
        v1 = TypedStates(store, apps.support_v1)
        await v1.create("s-1", apps.SupportV1(customer_name="Ada"))  # head: its creation
        await v1.create("s-2", apps.SupportV1(customer_name="Bob", priority="high"))
        assert (await migrate(store, apps.support_v2)).changed == 2
        v2 = TypedStates(store, apps.support_v2)
        later = await v2.load("s-2")
        later.escalated = True
        await v2.save("s-2", later)  # written after its migration
        return {a: await v2.load(a) for a in ("s-1", "s-2")}


async def _imported(url: str) -> tuple[dict[str, apps.SupportV2], list[list[int]]]:
    async with StateStore(url) as store:
        v2 = TypedStates(store, apps.support_v2)
        states = {a: await v2.load(a) for a in ("s-1", "s-2")}
        versions = [[e.schema_version async for e in store.history(a)] for a in ("s-1", "s-2")]
        return states, versions


def test_an_export_of_agents_migrated_at_their_creation_imports(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    states = asyncio.run(_migrated_store(source))
    out = tmp_path / "agents.jsonl"
    exported = sk_in_process("export", "--db", source, "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert sk_in_process("init", target).returncode == 0
    imported = sk_in_process("import", str(out), "--db", target)
    assert imported.returncode == 0, imported.stderr
    got, versions = asyncio.run(_imported(target))
    assert got == states
    assert versions == [[2], [2, 2]]
    assert sk_in_process("verify", "--db", target).returncode == 0
