"""A tiered backend with a cold tier remembers a bounded number of agents found without
a cold marker (a memo that saves a marker read), however many agents a long-running
worker touches. Was: one entry per agent ever touched, dropped only by a demotion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import tiered_rehydrate


async def test_the_settled_memo_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiered_rehydrate, "_SETTLED_MAX", 8)
    url = f"tiered://?hot=memory://&durable=sqlite:///{tmp_path / 'd.db'}&cold=memory://"
    async with StateStore(url, witness=False) as store:
        backend: Any = store.backend

        async def touch(first: int, count: int) -> int:
            for n in range(first, first + count):
                await store.save(f"a-{n}", {"n": n})
            return len(backend._settled)

        after_n = await touch(0, 20)
        after_2n = await touch(20, 20)
        assert after_n <= 8 and after_2n <= 8, (after_n, after_2n)  # was 20, then 40
        assert await backend.demote("a-3")  # what the memo is for still holds
        assert (await store.load("a-3")).data == {"n": 3}  # (brought back from cold)
        assert [(await store.load(f"a-{n}")).data["n"] for n in range(40)] == list(range(40))
