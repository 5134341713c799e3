"""``delete_for_runs`` and retention walk every thread of the store: a thread deleted by
another writer while they do is skipped, not an error (on a store other processes write
to, the walk failed with ``AgentNotFound``)."""

from __future__ import annotations

from typing import Any

from statekeeper.integrations.langgraph import StatekeeperSaver

from .conftest import Api, Chain


async def test_a_thread_deleted_during_delete_for_runs_is_skipped(
    saver: StatekeeperSaver,
) -> None:
    api = Api(saver, "async")
    gone = Chain(api)
    await gone.step({"a": 1}, {"run_id": "run-1"})
    kept = Chain(api)
    await kept.step({"a": 1}, {"run_id": "run-1"})
    await kept.step({"a": 2}, {"run_id": "run-2"})
    view = saver._view
    deleted: list[str] = []

    async def deleted_first(st: Any) -> Any:
        if st.thread_id == gone.thread_id and not deleted:
            deleted.append(st.thread_id)
            # another writer deletes the thread between its open and its scan
            for agent in await saver._generations(st.thread_id):
                await saver.store.delete(agent)
        return await view(st)

    saver._view = deleted_first  # type: ignore[method-assign]
    await api.delete_for_runs(["run-1"])
    assert deleted
    left = await api.list({"configurable": {"thread_id": kept.thread_id}})
    assert [t.metadata["run_id"] for t in left] == ["run-2"]
    assert await api.list({"configurable": {"thread_id": gone.thread_id}}) == []
