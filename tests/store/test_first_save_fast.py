"""The first save of a freshly opened store, on an agent it has loaded, is the common
save (the flat save or ``save_fast``): the store's write gate — its witness and key
checks, made once before its first write — is passed on the way, not by sending that
save down the general path (``WritePipeline.write``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidAgentId
from statekeeper.store.writes import WritePipeline


def _count_general(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    general: list[str] = []
    write = WritePipeline.write

    async def counted(self: WritePipeline, agent_id: str, *args: Any, **kwargs: Any) -> Any:
        general.append(agent_id)
        return await write(self, agent_id, *args, **kwargs)

    monkeypatch.setattr(WritePipeline, "write", counted)
    return general


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("fsm", [False, True])
async def test_the_first_save_after_open_and_load_is_the_common_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, fsm: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:
        await store.save("a", {"messages": ["hi"]}, fsm_state="idle" if fsm else None)
    general = _count_general(monkeypatch)
    state = {"fsm_state": "busy"} if fsm else {}
    async with StateStore(url, durability=durability) as store:
        assert (await store.load("a")).data == {"messages": ["hi"]}
        await store.save("a", {"messages": ["hi", "there"]}, **state)
        await store.save("a", {"messages": ["hi", "there", "again"]}, **state)
        assert general == []
    async with StateStore(url) as store:
        loaded = await store.load("a")
        assert (loaded.seq, loaded.data) == (3, {"messages": ["hi", "there", "again"]})
        assert loaded.fsm_state == ("busy" if fsm else None)
        assert (await store.verify(["a"])).ok


async def test_an_invalid_id_on_a_fresh_store_is_still_refused_first(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        with pytest.raises(InvalidAgentId):
            await store.save("", {"x": 1})
        await store.save("a", {"x": 1})
        assert (await store.load("a")).data == {"x": 1}
