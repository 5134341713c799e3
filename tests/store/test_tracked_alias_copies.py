"""A copy of ``agent.data`` keeps its aliases, as a copy of a plain dict does.

``copy.deepcopy`` and pickle copy an object graph once: a list held at two keys is one
list in the copy too, so a change through one key shows at the other. The tracked
containers copied each place apart: a deep copy of ``agent.data`` put back into it and
changed through one alias saved what no plain dict would hold (the other alias kept the
old value), with no error. Found by ``test_tracked_data.py``'s state machine (a
``deepcopy`` of a dict holding an alias, then a ``pop``).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore


def _plain(x: list[Any]) -> dict[str, Any]:
    return {"a": x, "": x, "n": {"k": [1]}}


@pytest.mark.parametrize("how", ["deepcopy", *(f"pickle{p}" for p in range(6))])
async def test_a_copy_of_the_data_keeps_its_aliases_and_is_saved_as_a_plain_dict_would_be(
    tmp_path: Path, how: str
) -> None:
    def copied(value: Any) -> Any:
        if how == "deepcopy":
            return copy.deepcopy(value)
        return pickle.loads(pickle.dumps(value, protocol=int(how[-1])))

    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        agent = await store.agent("a", initial_data={})
        x: list[Any] = [None]
        agent.data.update(_plain(x))
        model = _plain([None])

        got, want = copied(agent.data), copied(model)
        assert type(got) is dict and type(got["a"]) is list and type(got["n"]) is dict
        assert got["a"] is got[""]  # one list in the copy, as in a plain dict's
        agent.data["b"], model["b"] = got, want
        agent.data["b"]["a"].pop()
        model["b"]["a"].pop()
        assert agent.data == model
        await agent.save()
    async with StateStore(url) as store:
        assert (await store.load("a")).data == model
