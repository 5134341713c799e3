"""The inspector's repair button and an agent deleted and written again by another
process while repair ran: the snapshot left unwritten is said to need another repair,
not counted among the problems repair cannot fix."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import make_client
from .test_routes import _csrf


def test_repair_of_an_agent_remade_meanwhile_says_repair_again(
    store_copy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot left unwritten because the agent was deleted and written again while
    repair ran was counted among the problems 'repair cannot fix'."""
    import sqlite3

    from statekeeper import StateStore
    from statekeeper.store import repair as repair_module

    with sqlite3.connect(store_copy.removeprefix("sqlite:///")) as db:
        db.execute(
            "UPDATE sk_snapshots SET payload = X'00' || payload WHERE agent_id = 'agent-000'"
        )
    replay = repair_module._rebuilt

    async def replayed_then_remade(store: Any, agent_id: str, seqs: Any) -> Any:
        out = await replay(store, agent_id, seqs)
        async with StateStore(store_copy) as other:  # "another process"
            await other.delete(agent_id)
            await other.save(agent_id, {"n": 1})
        return out

    monkeypatch.setattr(repair_module, "_rebuilt", replayed_then_remade)
    with make_client(store_copy, allow_writes=True) as c:
        csrf = _csrf(c.get("/agent?id=agent-000").text)
        done = c.post("/agent/repair", data={"id": "agent-000", "csrf": csrf})
    assert done.status_code == 200, done.text
    assert "0 snapshot(s) rebuilt; 0 problem(s) repair cannot fix" in done.text
    assert "not written: the agent changed while repair ran (repair again)" in done.text
