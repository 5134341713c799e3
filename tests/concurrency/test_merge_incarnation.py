"""``merge_into`` of a copy whose agent was deleted and created again since the copy was
read: the same id, the same seq, another incarnation. A fast-forward used to overwrite
the new agent with the old copy (its acknowledged writes lost without an error); the
merge now compares the incarnation (``created_at``) and raises ``AgentReplaced``."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import Version, merge_into
from statekeeper.errors import AgentReplaced, ConfigurationError, ConflictError


def ticking() -> list[float]:
    return [1_000.0]


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_copy_of_a_replaced_agent_is_refused_not_fast_forwarded(
    tmp_path: Path, engine: str
) -> None:
    now = ticking()

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, clock=clock) as store:
        await store.save("doc", {"title": "old", "n": 1})
        await store.save("doc", {"title": "old", "n": 2})
        copied = await store.load("doc")  # the offline copy: seq 2 of the first incarnation
        await store.delete("doc")
        await store.save("doc", {"title": "new", "n": 1})  # another agent, same id ...
        await store.save("doc", {"title": "new", "n": 2})  # ... at the same seq
        edited = Version.of(copied.data).edited({**copied.data, "n": 3}, "laptop")
        with pytest.raises(AgentReplaced) as caught:
            await merge_into(
                store, "doc", edited, base_seq=copied.seq, created_at=copied.created_at
            )
        assert isinstance(caught.value, ConflictError)  # nothing written, as any conflict
        assert caught.value.created_at == copied.created_at
        assert caught.value.found == (await store.load("doc")).created_at
        assert (await store.load("doc")).data == {"title": "new", "n": 2}
        assert await store.head("doc") == 2
        # the copy of the stored incarnation still merges (a fast-forward)
        current = await store.load("doc")
        mine = Version.of(current.data).edited({**current.data, "n": 9}, "laptop")
        done = await merge_into(store, "doc", mine, base_seq=2, created_at=current.created_at)
        assert not done.merged and done.seq == 3
        with pytest.raises(ConfigurationError):  # an incarnation with no base to name
            await merge_into(store, "other", mine, base_seq=0, created_at=current.created_at)


async def test_a_replacement_during_the_merge_is_seen_without_created_at() -> None:
    """The base read at the start names its incarnation: an agent deleted and created
    again between that read and the write is not overwritten (not retried either)."""
    now = ticking()

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    async with StateStore("memory://", clock=clock) as store:
        await store.save("doc", {"n": 1})
        base = await store.load("doc")
        real_get = store.get
        replaced: list[bool] = []

        async def get_after_a_replacement(agent_id: str):  # type: ignore[no-untyped-def]
            if not replaced:
                replaced.append(True)
                await store.delete(agent_id)
                await store.save(agent_id, {"n": 100})  # a new agent, head 1 again
            return await real_get(agent_id)

        store.get = get_after_a_replacement  # type: ignore[method-assign]
        with pytest.raises(AgentReplaced):
            await merge_into(store, "doc", Version({"n": 2}), base_seq=base.seq)
        store.get = real_get  # type: ignore[method-assign]
        assert (await store.load("doc")).data == {"n": 100}
