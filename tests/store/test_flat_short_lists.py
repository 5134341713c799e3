"""The flat save (store/flat.py) of a list of fewer than 16 items — every chat's first
saves, msgpack's one-byte array header — proves a growth on the bytes itself, as it
does for a 16-bit header, without :func:`statekeeper.store.change._grew`; what it
stores is what the general path stores, and an edited or shortened short list is
handed on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store import flat

from ..conftest import FakeClock
from .test_save_fast import Calls, stored


def chat(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message {i} " + "y" * (i % 5)} for i in range(n)]


#: (the document, whether the flat save makes it)
SAVES: list[tuple[dict[str, Any], bool]] = [
    ({"messages": chat(1)}, True),  # [] -> 1 item
    ({"messages": chat(2)}, True),
    ({"messages": chat(5)}, True),  # three items at once
    ({"messages": chat(5)}, True),  # nothing changed
    ({"messages": chat(4)}, False),  # shortened: the general diff
    ({"messages": [{"edited": True}, *chat(5)[1:]]}, False),  # an old item edited
    ({"messages": chat(15)}, False),  # (the edited item replaced: not a growth)
    ({"messages": chat(15)}, True),
    ({"messages": chat(16)}, True),  # one-byte header -> 16-bit header
    ({"messages": chat(30)}, True),
]


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_a_short_list_that_grew_is_saved_flat_without_the_general_growth_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    grew = [0]
    general = flat._grew  # type: ignore[attr-defined]

    def counted(before: bytes, after: bytes) -> tuple[int, int] | None:
        grew[0] += 1
        return general(before, after)

    monkeypatch.setattr(flat, "_grew", counted)
    for name, fast in (("flat.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}",
            clock=FakeClock(),
            snapshot_every=1000,
            durability=durability,
        ) as store:
            await store.save("a", {"messages": []})
            made = []
            for doc, _ in SAVES:
                store._writes.fast = fast
                before = calls.flat
                await store.save("a", doc)
                made.append(calls.flat > before)
            if fast:
                assert made == [made_flat for _, made_flat in SAVES]
                assert grew[0] == 0  # every list here had a one-byte or 16-bit header
            assert (await store.load("a")).data == SAVES[-1][0]
            assert (await store.verify()).ok
    assert await stored(tmp_path / "flat.db") == await stored(tmp_path / "general.db")
