"""A settle on a tiered store whose hot tier refuses the mirrored row with a
``ConfigurationError`` AFTER the durable tier committed it (the row and the removal of
the snapshot it replaces stand there: the durable tier is the truth).

Was: the settle raised the hot tier's refusal (the caller told it failed, the row
stored all the same), and the hot copy was left as it was. Now the settle reports its
row (the seq) and the hot copy is dropped, refilled from the durable tier on the next
read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import ConfigurationError


async def test_a_settle_whose_hot_mirror_is_refused_reports_its_row(tmp_path: Path) -> None:
    hot = SQLiteBackend(tmp_path / "h.db")
    # (hot_timeout: a hot call slower than the default 0.5 s on a loaded machine would mark
    # the tier down and skip the mirror this test is about)
    backend = TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=hot, hot_timeout=60)
    async with StateStore(backend, snapshot_every=100, settle_after=None) as store:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        assert await hot.head("a") == 5  # (mirrored)
        refused: list[str] = []

        async def replace_snapshot(*args: Any, **kw: Any) -> bool:
            refused.append("replace_snapshot")
            raise ConfigurationError("the hot tier refused the row (injected)")

        hot.replace_snapshot = replace_snapshot  # type: ignore[method-assign]
        assert await store.settle("a") == 5  # was: ConfigurationError, the row stored
        assert refused == ["replace_snapshot"]
        durable = await backend.durable.latest_snapshot("a")
        assert durable is not None and durable.seq == 5  # (the durable row: the truth)
        assert await hot.head("a") == 0  # (the hot copy dropped, not left stale)
    reopened = TieredBackend(
        SQLiteBackend(tmp_path / "d.db"), hot=SQLiteBackend(tmp_path / "h.db"), hot_timeout=60
    )
    async with StateStore(reopened, cache_size=0, settle_after=None) as fresh:
        assert (await fresh.load("a")).data == {"n": 5}
