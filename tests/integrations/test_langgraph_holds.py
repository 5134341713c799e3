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
    with pytest.raises(AgentOnHold):  # LangGraph's prune returns nothing: it says so
        await api.prune([chain.thread_id])
    assert len(await api.list(config(chain.thread_id))) == 5
    await portal.run(remove_hold(api.saver.store, agent, "case closed"))
    report = await api.prune_retention([chain.thread_id], keep_last=2)
    assert report.checkpoints_deleted == 3


async def test_a_partly_held_thread_is_deleted_whole_or_not_at_all(api: Api) -> None:
    """A thread whose streams are two generations (a compaction stopped after making
    the next one), the newer one held: delete_thread deletes neither (it used to delete
    the unheld generation, then fail on the held one)."""
    from statekeeper.integrations.langgraph import mapping as m

    chain = Chain(api)
    for i in range(3):
        await chain.step({"i": i})
    store, portal = api.saver.store, api.saver._portal
    base = await _thread_agent(api, chain.thread_id)
    newer = m.agent_id(api.saver.prefix, chain.thread_id, m.next_generation(base.split("#")[-1]))
    await portal.run(store.create(newer, m.new_doc(chain.thread_id, sealed=False)))
    await portal.run(add_hold(store, newer, "Smith v. Acme"))
    with pytest.raises(AgentOnHold) as caught:
        await api.delete_thread(chain.thread_id)
    assert caught.value.agent_id == newer and caught.value.hold == newer
    listed = {i.agent_id for i in await portal.run(store.list_agents(limit=1000))}
    assert {base, newer} <= listed  # nothing deleted
    assert len(await api.list(config(chain.thread_id))) == 3
    # retention skips it as a whole too (the live generation itself is not held)
    report = await api.prune_retention([chain.thread_id], keep_last=1)
    assert report.threads_skipped == [chain.thread_id] and report.checkpoints_deleted == 0
    await portal.run(remove_hold(store, newer, "case closed"))
    await api.delete_thread(chain.thread_id)
    listed = {i.agent_id for i in await portal.run(store.list_agents(limit=1000))}
    assert not {base, newer} & listed
