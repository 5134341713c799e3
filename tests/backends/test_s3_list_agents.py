"""``S3Backend.list_agents`` lists the agents' objects once, not once per agent."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.url import open_backend
from statekeeper.testing import request

from ._services import fresh_url

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_list_agents_is_one_listing_and_a_head_per_agent(tmp_path: Path) -> None:
    with fresh_url("s3", tmp_path) as url:
        backend = open_backend(url)
        assert isinstance(backend, S3Backend)
        try:
            ids = [f"agent-{i:02d}" for i in range(30)]
            for agent_id in ids:
                await backend.append(request(agent_id, 0, 2, key="k"))
                await backend.append(request(agent_id, 2, 1))
            await backend.append(request("gone", 0, 1))
            await backend.delete_agent("gone")
            calls: collections.Counter[str] = collections.Counter()

            def count(event_name: str, **_: Any) -> None:
                calls[event_name.rsplit(".", 1)[-1]] += 1

            backend._s3.meta.events.register("before-call.s3", count)
            listed = await backend.list_agents(limit=100)
            assert [i.agent_id for i in listed] == ids
            assert all(i.head_seq == 3 for i in listed)
            # was: one ListObjectsV2 of the ids, then a ListObjectsV2 and a HEAD per agent
            assert calls["ListObjectsV2"] == 1, dict(calls)
            assert calls["HeadObject"] == 30, dict(calls)
            # pages: each after the last of the one before, none lost or repeated
            paged: list[str] = []
            after: str | None = None
            while page := await backend.list_agents(after=after, limit=7):
                paged += [i.agent_id for i in page]
                after = page[-1].agent_id
            assert paged == ids
            assert [i.agent_id for i in await backend.list_agents("agent-28", 5)] == ["agent-29"]
        finally:
            await backend.close()
