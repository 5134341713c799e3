"""An engine whose ``delete_agent_at`` override predates the checksum argument.

``Backend.delete_agent_at(agent_id, head, checksum=None)`` took a third argument (the
head event's stored checksum: the head record's identity). A third-party engine that
overrides it with the old two-argument signature got a bare ``TypeError`` ("takes 3
positional arguments but 4 were given") from every delete made at a head record's
identity: the store now raises ``CapabilityUnsupported`` naming the engine class and
what to add, nothing deleted; and the contract's conformance suite has a case that
fails on such an override, saying what the signature must be.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import CapabilityUnsupported, ConflictError
from statekeeper.store.conditional import delete_only_at
from statekeeper.store.delete_shown import head_identity
from statekeeper.testing.lifecycle import LifecycleConformance


class OldEngine(MemoryBackend):
    """A third-party engine written against the two-argument contract (with no
    ``append_together``, as most: its deletes go through ``delete_agent_at``)."""

    appends_together = False

    async def delete_agent_at(self, agent_id: str, head: int) -> bool:  # type: ignore[override]
        current = await self.head(agent_id)
        if current != head:
            raise ConflictError(agent_id, head, current)
        return await self.delete_agent(agent_id)


async def test_a_delete_at_identity_names_the_engine_and_deletes_nothing() -> None:
    async with StateStore(OldEngine()) as store:
        await store.create("a", {"n": 1})
        await store.save("a", {"n": 2})
        head = await head_identity(store, "a")
        assert head is not None
        with pytest.raises(CapabilityUnsupported) as caught, delete_only_at(head[0], head[2]):
            await store.delete("a")
        said = str(caught.value)
        assert f"{OldEngine.__module__}.OldEngine" in said
        assert "checksum: bytes | None = None" in said
        assert "Nothing was deleted" in said
        assert (await store.get("a")) is not None  # kept
        with delete_only_at(head[0]):  # at the head seq alone the old override serves
            assert await store.delete("a") is True


async def test_the_conformance_suite_finds_the_old_override(tmp_path: Path) -> None:
    old, current = OldEngine(), MemoryBackend()
    case = LifecycleConformance()
    with pytest.raises(pytest.fail.Exception, match=r"OldEngine\.delete_agent_at must take"):
        await case.test_delete_at_takes_a_checksum(old)
    await case.test_delete_at_takes_a_checksum(current)  # (the built-in engines pass)
    await old.close()
    await current.close()
