"""The listing of a tiered store past claims that stand for no agent.

A demotion's claim beside no stream (the agent deleted under it, the demotion killed
before ending its claim) is no agent: ``list_agents`` passes over its marker. Before,
the demoted agents of a page were read from the first ``limit`` markers only, the
passed-over claims among them: the demoted agents after them were cut off from the
page while live agents sorting after them filled it, so the next page (after the
last live one) never listed them — a backup (which pages ``list_agents``) left them
out, without an error."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.testing import request


async def test_every_agent_is_listed_past_claims_beside_no_stream(tmp_path: Path) -> None:
    backend = TieredBackend(
        SQLiteBackend(tmp_path / "durable.db"), cold=SQLiteBackend(tmp_path / "cold.db")
    )
    try:
        await backend.initialize()
        for agent_id in ("1", "2", "9"):
            await backend.append(request(agent_id, 0))
        assert await backend.demote("1")
        now = time.time()
        for gone in ("0", "00"):  # (claims whose agents were deleted under them)
            body = {"head": 1, "created": now, "updated": now, "claimed": now, "owner": None}
            claim = RawEvent(1, "cold", now, orjson.dumps(body), gone.encode().ljust(16, b"-"))
            await backend.durable.append(AppendRequest(COLD_MARKER + gone, 0, (claim,)))
        listed: list[str] = []
        after: str | None = None
        while page := await backend.list_agents(after, limit=2):
            listed += [info.agent_id for info in page]
            after = page[-1].agent_id
        assert listed == ["1", "2", "9"]  # (before: ["2", "9"], "1" never listed)
        assert await backend.count_agents() == 3
    finally:
        await backend.close()
