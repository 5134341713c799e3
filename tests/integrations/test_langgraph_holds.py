"""A legal hold kept in the store (``statekeeper hold``) covers a LangGraph thread's
stream: retention skips the thread, deleting it is refused (issue 15: a hold exempts
an agent "from every purge")."""

from __future__ import annotations

import pytest

from statekeeper.errors import AgentOnHold
from statekeeper.governance.holds import add_hold, remove_hold

from .conftest import Api, Chain, config


async def _thread_agent(api: Api, thread_id: str) -> str:
    store = api.saver.store
    listed = await api.saver._portal.run(store.list_agents(limit=1000))
    (agent,) = [i.agent_id for i in listed if thread_id in i.agent_id]
    return agent


async def test_a_held_thread_is_not_pruned_nor_deleted(api: Api) -> None:
    chain = Chain(api)
    for i in range(5):
        await chain.step({"i": i})
    agent = await _thread_agent(api, chain.thread_id)
    portal = api.saver._portal
    await portal.run(add_hold(api.saver.store, agent, "Smith v. Acme"))
    report = await api.prune_retention([chain.thread_id], keep_last=2)
    assert report.threads_skipped == [chain.thread_id] and report.checkpoints_deleted == 0
    assert len(await api.list(config(chain.thread_id))) == 5
    with pytest.raises(AgentOnHold):
        await api.delete_thread(chain.thread_id)
    assert len(await api.list(config(chain.thread_id))) == 5
    await portal.run(remove_hold(api.saver.store, agent, "case closed"))
    report = await api.prune_retention([chain.thread_id], keep_last=2)
    assert report.checkpoints_deleted == 3
