"""Change detection's packer (``change.dump_keys``): with ``ormsgpack`` installed it
packs with ``ormsgpack`` (half the CPU of the msgpack ``Packer``), and must make the
very bytes the strict msgpack ``Packer`` makes — the bytes a state is held as, compared
with the bytes kept by earlier saves and parsed back by ``unpack_document`` — and
refuse what that packer refuses, so that a save is proven on bytes exactly as before."""

from __future__ import annotations

import datetime
import enum
import uuid
from collections import OrderedDict
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.store import change
from statekeeper.store.change import dump_keys, fast_packer

pytest.importorskip("ormsgpack")

ints = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([2**e + d for e in (5, 7, 8, 15, 16, 31, 32, 63) for d in (-1, 0)]),
)
scalars = st.one_of(
    st.none(), st.booleans(), ints, st.floats(allow_nan=True), st.text(max_size=300), st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=20), st.dictionaries(st.text(max_size=8), inner, max_size=20)
    ),
    max_leaves=60,
)


def strict(value: Any) -> bytes:
    packed: bytes = msgpack.Packer(strict_types=True, use_bin_type=True).pack(value)
    return packed


def test_the_fast_packer_is_used_when_installed() -> None:
    assert fast_packer() is not None


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), values, max_size=5))
def test_the_bytes_are_the_strict_msgpack_packers(document: dict[str, Any]) -> None:
    assert dump_keys(document) == {key: strict(value) for key, value in document.items()}


class Name(str):
    pass


class Count(int):
    pass


class Mode(enum.Enum):
    ON = 1


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        Name("a"),
        Count(3),
        Mode.ON,
        datetime.datetime(2026, 1, 1),
        datetime.date(2026, 1, 1),
        uuid.UUID(int=1),
        OrderedDict(a=1),
        {Name("k"): 1},
        2**64,
        -(2**63) - 1,
        "\ud800",
        object(),
        [1, [2, (3,)]],
    ],
    # an object()'s repr holds its address, which differs between xdist workers
    ids=lambda value: type(value).__name__ if type(value) is object else repr(value),
)
def test_what_the_strict_packer_refuses_is_refused(value: Any) -> None:
    with pytest.raises((TypeError, ValueError, OverflowError)):
        strict(value)
    assert dump_keys({"v": value}) is None


async def test_without_ormsgpack_the_msgpack_packer_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change, "_PACKB", None)
    assert dump_keys({"m": [1, True, 1.0]}) == {"m": strict([1, True, 1.0])}
    assert dump_keys({"m": (1,)}) is None
    assert dump_keys({"m": [1]}) == {"m": strict([1])}  # (the buffer reset after a refusal)
    async with StateStore("memory://") as store:
        for n in range(1, 5):
            await store.save("a", {"m": list(range(n))})
        assert (await store.load("a")).data == {"m": [0, 1, 2, 3]}
