"""``merge_into``: the agent deleted and created again (up to the same head) between the
merge's read of the stored state and its write. The write is made at the seq it read
(``expected_seq``), which the new incarnation has too: the merge (or the fast-forward
to the copy) landed on an agent it never read, with or without ``created_at`` — the
new agent's writes overwritten or mixed, no error. The write now carries the chain
link it read at that seq (as a ``DurableAgent``'s does): another stream there is a
conflict, and the attempt that reads again sees the new incarnation (``AgentReplaced``)."""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import Version, merge_into
from statekeeper.errors import AgentReplaced


@pytest.mark.parametrize("with_created_at", [True, False], ids=["created_at", "no-created_at"])
@pytest.mark.parametrize("moved", [False, True], ids=["fast-forward", "merge"])
@pytest.mark.parametrize(
    ("engine", "writer"),
    [("memory", "same"), ("sqlite", "same"), ("sqlite", "other")],
    ids=["memory", "sqlite", "sqlite-another-store"],
)
async def test_a_replacement_between_the_read_and_the_write_is_not_written_over(
    tmp_path: Path, engine: str, writer: str, moved: bool, with_created_at: bool
) -> None:
    now = [1_000.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, clock=clock) as store, StateStore(url, clock=clock) as other:
        replacer = other if writer == "other" else store
        await store.save("doc", {"n": 1})
        base = await store.load("doc")
        head = 1
        if moved:  # another writer since the copy: a real merge
            await store.save("doc", {"n": 1, "theirs": True})
            head = 2
        real_get = store.get
        replaced: list[bool] = []

        async def get_then_replaced(agent_id: str, **kw: Any) -> Any:
            found = await real_get(agent_id, **kw)
            if not replaced:  # after the merge's read, before its write
                replaced.append(True)

                async def replace() -> None:  # another task's (a fresh context)
                    await replacer.delete(agent_id)
                    for i in range(head):
                        await replacer.save(agent_id, {"new": i})  # the same head again

                await asyncio.create_task(replace(), context=contextvars.Context())
            return found

        store.get = get_then_replaced  # type: ignore[method-assign]
        ours = Version.of(base.data).edited({"n": 2}, "laptop")
        created_at = base.created_at if with_created_at else None
        with pytest.raises(AgentReplaced):
            await merge_into(store, "doc", ours, base_seq=base.seq, created_at=created_at)
        store.get = real_get  # type: ignore[method-assign]
        assert replaced
        assert (await store.load("doc")).data == {"new": head - 1}
        assert await store.head("doc") == head
