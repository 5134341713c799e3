"""An agent page has a size cap: a 3 MB state rendered 3.3 MB of HTML (every value of
it as a tree). The page shows the state's first STATE_BUDGET characters, says what it
left out, and links to the whole state as JSON; an event's or a diff's changes are cut
to CHANGES_BUDGET rows the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from statekeeper import StateStore

from .conftest import make_client

BLOB = ["y" * 1000 for _ in range(3000)]  # ~3 MB
#: statekeeper.inspector.capped's budgets (here: the test fails on a build without them)
STATE_BUDGET = 256 * 1024
CHANGES_BUDGET = 500


def test_a_large_state_is_cut_and_downloadable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"

    async def seed() -> None:
        async with StateStore(url) as store:
            await store.save("huge-1", {"blob": BLOB, "small": "kept"})
            await store.save("huge-1", {"blob": BLOB, "small": "kept", "n": 1})
            # an event of many changes
            await store.save("many-1", {f"k{i:04d}": i for i in range(10)})
            await store.save("many-1", {f"k{i:04d}": -i for i in range(2 * CHANGES_BUDGET)})

    asyncio.run(seed())
    client: Any
    with make_client(url) as client:
        page = client.get("/agent?id=huge-1")
        assert page.status_code == 200
        assert len(page.content) < 3 * STATE_BUDGET, len(page.content)  # was 3.3 MB
        assert 'id="state-capped"' in page.text and "not shown" in page.text
        assert "[3000 items]" in page.text  # the real size is still said
        fragment = client.get("/agent/state?id=huge-1&seq=1")
        assert fragment.status_code == 200 and len(fragment.content) < 3 * STATE_BUDGET
        assert "/agent/state.json?id=huge-1&amp;seq=1" in fragment.text
        whole = client.get("/agent/state.json?id=huge-1&seq=1")
        assert whole.status_code == 200 and "attachment" in whole.headers["content-disposition"]
        assert whole.json()["data"] == {"blob": BLOB, "small": "kept"}
        assert whole.json()["seq"] == 1
        assert client.get("/agent/state.json?id=huge-1").json()["data"]["n"] == 1
        small = client.get("/agent?id=many-1")
        assert 'id="state-capped"' not in small.text  # a small state: all of it
        event = client.get("/agent/event?id=many-1&seq=2")
        assert event.status_code == 200
        assert event.text.count('<tr class="op-') == CHANGES_BUDGET
        assert "more changes not shown" in event.text
