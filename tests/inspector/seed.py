"""A small store with everything the inspector shows: agents that moved through the
default machine, namespaces, durable steps and idempotency keys, a lease, hostile ids
and data, and a LangGraph thread with a fork."""

from __future__ import annotations

from typing import Any

from statekeeper import StateStore, StateTransition
from statekeeper.concurrency.steps import Steps

#: an id and a value that would run script or break out of an attribute if unescaped
HOSTILE_ID = "<script>window.__pwned=1</script>\"'><img src=x onerror=window.__pwned=2>"
HOSTILE_VALUE = "</pre><script>window.__pwned=3</script><b onmouseover=alert(1)>x</b>"
T0 = 1_750_000_000.0


async def seed(store: StateStore) -> None:
    for i in range(30):
        agent = await store.agent(f"agent-{i:03d}")
        agent.data["task"] = f"task {i}"
        await agent.transition(StateTransition.START_PROCESSING, actor="worker-1")
        if i % 3 == 0:
            agent.data["tool"] = {"name": "search", "query": f"q{i}"}
            await agent.transition(StateTransition.CALL_TOOL, actor="worker-1")
            agent.data["tool"]["result"] = ["a", "b"]
            await agent.transition(StateTransition.RECEIVE_RESULT, actor="worker-2")
        if i % 2 == 0:
            agent.data["answer"] = f"done {i}"
            await agent.transition(StateTransition.COMPLETE, actor="worker-2")
    for name in ("alpha", "beta"):
        await store.save(f"tenant/{name}", {"owner": name}, actor="admin")
    # durable steps and an idempotency key
    steps = Steps(store, "order-7")
    await steps.run("charge", lambda: {"charged": 42})
    await steps.run("ship", lambda: "shipped")
    await store.save("order-7", {"paid": True}, idempotency_key="pay-7", actor="billing")
    await store.backend.acquire_lease("order-7", "worker-9", 3600.0)
    # hostile id and data
    await store.save(
        HOSTILE_ID, {"note": HOSTILE_VALUE, HOSTILE_VALUE: [HOSTILE_VALUE]}, actor=HOSTILE_VALUE
    )
    await store.save(HOSTILE_ID, {"note": HOSTILE_VALUE + "!", "n": 2})


def seed_thread(url: str) -> dict[str, Any]:
    """A LangGraph thread ``chat-1`` with a fork (two children of one checkpoint) and
    a pending write, written through the real saver."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from statekeeper.integrations.langgraph import StatekeeperSaver

    ids: dict[str, Any] = {}
    with StatekeeperSaver.from_url(url) as saver:
        config: dict[str, Any] = {"configurable": {"thread_id": "chat-1", "checkpoint_ns": ""}}
        parent = None
        history = [HumanMessage("What is <b>2+2</b>?", id="m1")]
        for step in range(3):
            cp = empty_checkpoint()
            cp["id"] = f"1ef00000-0000-6000-8000-00000000000{step}"
            cp["channel_values"] = {"messages": list(history), "step": step}
            cp["channel_versions"] = {"messages": f"{step + 1:032}.0", "step": f"{step + 1:032}.0"}
            conf = dict(config["configurable"])
            if parent is not None:
                conf["checkpoint_id"] = parent
            saved = saver.put(
                {"configurable": conf}, cp, {"source": "loop", "step": step}, cp["channel_versions"]
            )
            parent = saved["configurable"]["checkpoint_id"]
            ids[f"step{step}"] = parent
            history.append(AIMessage("4" if step == 0 else f"still 4 ({step})", id=f"a{step}"))
        # a fork: a second child of step 1's checkpoint
        cp = empty_checkpoint()
        cp["id"] = "1ef00000-0000-6000-8000-000000000009"
        cp["channel_values"] = {"messages": [HumanMessage("What is 3+3?", id="m9")], "step": 2}
        cp["channel_versions"] = {"messages": f"{9:032}.0", "step": f"{9:032}.0"}
        saved = saver.put(
            {
                "configurable": {
                    "thread_id": "chat-1",
                    "checkpoint_ns": "",
                    "checkpoint_id": ids["step1"],
                    "allow_fork": True,
                }
            },
            cp,
            {"source": "fork", "step": 2},
            cp["channel_versions"],
        )
        ids["fork"] = saved["configurable"]["checkpoint_id"]
        saver.put_writes(
            {
                "configurable": {
                    "thread_id": "chat-1",
                    "checkpoint_ns": "",
                    "checkpoint_id": ids["fork"],
                }
            },
            [("messages", AIMessage("6", id="a9"))],
            task_id="task-1",
        )
    return ids
