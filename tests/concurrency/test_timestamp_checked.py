"""A stamp is checked when it is made, by the rule its reader applies.

Before, ``Timestamp`` took anything: a float wall (``time.time() * 1000``, the natural
way to write milliseconds), a negative one, a node that is not a string. A register set
at such a stamp was saved, and from then on every reader of the agent's field failed
(``Timestamp.from_json`` refuses it) — the register's value, and every later merge of
the agent, lost to all workers.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import HybridClock, LWWRegister, Timestamp, Version
from statekeeper.errors import InvalidArgument


@pytest.mark.parametrize(
    ("parts", "argument"),
    [
        ((1_700_000_000_000.5, 0, "w1"), "wall"),  # ms as a float
        ((-5, 0, "w1"), "wall"),
        ((True, 0, "w1"), "wall"),
        ((5, -1, "w1"), "logical"),
        ((5, 0.0, "w1"), "logical"),
        ((5, 0, 7), "node"),
    ],
)
def test_a_stamp_its_reader_would_refuse_is_refused_when_made(
    parts: tuple[object, object, object], argument: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Timestamp(*parts)
    assert caught.value.argument == argument
    assert f"timestamp's {argument}" in str(caught.value)


async def test_a_register_set_at_a_float_stamp_leaves_the_stored_field_readable(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'board.db'}"
    good = HybridClock("w1").now()
    async with StateStore(url) as store:
        await store.save(
            "board", Version({"last": LWWRegister().set("a", good).to_json()}).document()
        )
        stored = await store.load("board")
        last = LWWRegister.from_json(Version.of(stored.data).data["last"])
        with pytest.raises(InvalidArgument):  # the worker's own clock, in ms, as a float
            last = last.set("b", Timestamp(time.time() * 1000, 0, "w2"))
            await store.save("board", Version({"last": last.to_json()}).document())
    async with StateStore(url) as store:  # every reader can still read the field
        data = Version.of((await store.load("board")).data).data
        assert LWWRegister.from_json(data["last"]).value == "a"


def test_stamps_read_back_are_the_stamps_made() -> None:
    stamp = Timestamp(1_700_000_000_000, 3, "")
    assert Timestamp.from_json(stamp.to_json()) == stamp
    assert HybridClock("n", wall=lambda: -1.0).now() == Timestamp(0, 1, "n")
