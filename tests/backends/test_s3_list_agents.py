"""``S3Backend.list_agents`` lists the agents' objects once, not once per agent, and
makes no request per agent: each agent's head and times are in the name of its newest
commit's summary (a HEAD only for an agent without a summary that matches)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.url import open_backend
from statekeeper.records import RewriteRequest
from statekeeper.testing import request, snapshot

from ._services import fresh_url

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


def _counted(backend: S3Backend) -> collections.Counter[str]:
    calls: collections.Counter[str] = collections.Counter()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    backend._s3.meta.events.register("before-call.s3", count)
    return calls


async def test_list_agents_is_one_listing_and_no_request_per_agent(tmp_path: Path) -> None:
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
            calls = _counted(backend)
            listed = await backend.list_agents(limit=100)
            assert [i.agent_id for i in listed] == ids
            assert all(i.head_seq == 3 for i in listed)
            assert all(i.updated_at >= i.created_at > 0 for i in listed)
            # was: one ListObjectsV2 of the ids, then a ListObjectsV2 and a HEAD per agent;
            # then one listing and a HEAD per agent: O(agents) requests
            assert dict(calls) == {"ListObjectsV2": 1}, dict(calls)
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


async def test_the_info_listed_is_the_agents_own_whatever_became_of_its_summary(
    tmp_path: Path,
) -> None:
    """An agent written before summaries existed, one whose newest commit was rewritten
    (a new ETag) or split by a prune, one deleted and created again: each listed with the head and
    times a read of its newest commit gives (a HEAD when its summary does not match)."""
    with fresh_url("s3", tmp_path) as url:
        backend = open_backend(url)
        assert isinstance(backend, S3Backend)
        try:
            for agent_id in ("old", "pruned", "reborn", "plain", "rewritten"):
                await backend.append(request(agent_id, 0, 3))
                await backend.append(request(agent_id, 3, 2))
            root = backend._agent_root("old") + "h/"
            backend._delete_keys(backend._list(root))  # as stored before summaries
            await backend.save_snapshot("pruned", snapshot(4))
            await backend.prune("pruned", 4)  # inside the newest commit: split
            await backend.delete_agent("reborn")
            events = await backend.read("rewritten", 4)  # in the newest commit
            redacted = [dataclasses.replace(e, payload=b"redacted") for e in events]
            await backend.rewrite(RewriteRequest("rewritten", 5, None, redacted))
            await backend.append(request("reborn", 0, 1))
            expected = {a: await backend._run(backend._info_sync, a) for a in ("old", "pruned")}
            expected["reborn"] = await backend._run(backend._info_sync, "reborn")
            expected["plain"] = await backend._run(backend._info_sync, "plain")
            expected["rewritten"] = await backend._run(backend._info_sync, "rewritten")
            calls = _counted(backend)
            listed = {i.agent_id: i for i in await backend.list_agents()}
            assert listed == expected
            assert listed["reborn"].head_seq == 1 and listed["pruned"].head_seq == 5
            # the old agent's HEAD only (a split or rewritten commit's summary follows it)
            assert calls["HeadObject"] == 1, dict(calls)
            # the next append writes a summary: no HEAD for it any more
            await backend.append(request("old", 5, 1))
            calls.clear()
            again = {i.agent_id: i.head_seq for i in await backend.list_agents()}
            assert again == {"old": 6, "pruned": 5, "reborn": 1, "plain": 5, "rewritten": 5}
            assert dict(calls) == {"ListObjectsV2": 1}, dict(calls)
        finally:
            await backend.close()
