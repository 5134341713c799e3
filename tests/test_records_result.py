"""``AppendResult`` keeps the dataclass it was (its ``__init__`` is written by hand for
speed: docs/benchmarks.md, "seqfloor")."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import pytest

from statekeeper.records import AppendResult


def test_an_append_result_is_the_frozen_slotted_dataclass_it_was() -> None:
    result = AppendResult("a", 1, 2)
    assert result.duplicate is False
    assert result == AppendResult(agent_id="a", first_seq=1, last_seq=2, duplicate=False)
    assert result != AppendResult("a", 1, 2, True)
    assert hash(result) == hash(AppendResult("a", 1, 2))
    assert repr(result) == "AppendResult(agent_id='a', first_seq=1, last_seq=2, duplicate=False)"
    assert dataclasses.asdict(result) == {
        "agent_id": "a",
        "first_seq": 1,
        "last_seq": 2,
        "duplicate": False,
    }
    assert dataclasses.replace(result, duplicate=True) == AppendResult("a", 1, 2, True)
    assert pickle.loads(pickle.dumps(result)) == result
    assert copy.copy(result) == result
    assert list(inspect.signature(AppendResult).parameters) == [
        "agent_id",
        "first_seq",
        "last_seq",
        "duplicate",
    ]
    assert not hasattr(result, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.first_seq = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        AppendResult("a", 1)  # type: ignore[call-arg]
