"""The LangGraph saver over a store opened in a namespace: thread ids stay what the
graph calls them, each namespace's threads are its own, and ``list`` sees only them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint

from statekeeper import SyncStateStore
from statekeeper.integrations.langgraph import StatekeeperSaver

from ..backends._services import fresh_url


def _config(thread: str) -> dict[str, object]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(saver: StatekeeperSaver, thread: str, step: int, note: str) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"note": note}
    checkpoint["channel_versions"] = {"note": step + 1}
    config = saver.get_tuple(_config(thread))
    saver.put(
        config.config if config is not None else _config(thread),
        checkpoint,
        cast(Any, {"source": "loop", "step": step, "tenant": note.split(":")[0]}),
        {"note": step + 1},
    )


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
def test_two_namespaces_never_see_each_others_threads(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        acme = StatekeeperSaver.from_url(url, namespace="acme")
        globex = StatekeeperSaver.from_url(url, namespace="globex")
        try:
            for step in range(2):
                _put(acme, "t1", step, f"acme:{step}")
                _put(globex, "t1", step, f"globex:{step}")
            _put(acme, "t2", 0, "acme:t2")
            # the same thread id in two namespaces: two threads
            got = acme.get_tuple(_config("t1"))
            assert got is not None
            assert got.checkpoint["channel_values"]["note"] == "acme:1"
            assert got.config["configurable"]["thread_id"] == "t1"
            other = globex.get_tuple(_config("t1"))
            assert other is not None and other.checkpoint["channel_values"]["note"] == "globex:1"
            assert globex.get_tuple(_config("t2")) is None
            # list: every thread of the namespace, none of the other's
            listed = [c.config["configurable"]["thread_id"] for c in acme.list(None)]
            assert sorted(set(listed)) == ["t1", "t2"] and len(listed) == 3
            assert {dict(c.metadata)["tenant"] for c in acme.list(None)} == {"acme"}
            assert {dict(c.metadata)["tenant"] for c in globex.list(None)} == {"globex"}
            assert [c.metadata["step"] for c in globex.list(_config("t1"))] == [1, 0]
            assert list(globex.list(None, filter={"tenant": "acme"})) == []
            # deleting a thread in one namespace leaves the other's
            globex.delete_thread("t1")
            assert globex.get_tuple(_config("t1")) is None
            assert acme.get_tuple(_config("t1")) is not None
        finally:
            acme.close()
            globex.close()
        # stored under the namespace: the whole store sees both tenants' streams
        with SyncStateStore(url) as whole:
            ids = [i.agent_id for i in whole.list_agents(limit=1000)]
        assert ids and all(i.startswith("acme/") for i in ids)
        assert any("t1" in i for i in ids) and any("t2" in i for i in ids)
