"""Redis's ``append_together`` of changes alone (a tiered store's prune or rewrite with
its fence of the agent's demoted-agent marker: a new head tag) whose script ran but
whose reply was lost: sent again, the script is refused (the fence's expected tag is
gone: its own commit moved it), and the new head tag found on the marker is that
commit — the changes are done, as a plain ``rewrite`` recognises its own new tag.

Before, every such lost reply raised ``BackendError(maybe_applied=True)``: the tiered
prune or rewrite failed though made. A refusal with no such tag (another process's
change) is still unknown, ``maybe_applied``. Hooked script, no timing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")

from redis.exceptions import ConnectionError as RedisConnectionError

from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import BackendError
from statekeeper.records import RewriteRequest, StreamChange
from statekeeper.testing._contract import request

from ._services import REDIS_URL, delete_prefix, namespace, require_redis

MARKER = "\x01sk-cold/a"


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_tlost_") + ":"
    yield name
    delete_prefix(name)


@pytest.fixture
async def backend(prefix: str) -> AsyncIterator[RedisBackend]:
    found = RedisBackend(REDIS_URL, prefix=prefix)
    await found.open()
    try:
        await found.append(request("a", 0, 4, snap_at=2))
        await found.append(request(MARKER, 0, snap_at=1))
        yield found
    finally:
        await found.close()


def _lost_once(backend: Any, meanwhile: Any = None) -> list[int]:
    """The together script's first run applied, its reply lost (``meanwhile`` run
    before the loss is reported)."""
    real = backend._together_script
    calls = [0]

    async def flaky(**kwargs: object) -> object:
        calls[0] += 1
        reply = await real(**kwargs)
        if calls[0] == 1:
            if meanwhile is not None:
                await meanwhile()
            raise RedisConnectionError("Connection closed by server.")
        return reply

    backend._together_script = flaky
    return calls


async def _changes(backend: RedisBackend) -> list[StreamChange]:
    head, tag = await backend.head_tag(MARKER)
    fence = RewriteRequest(MARKER, head, tag, head_tag=b"f" * 16)
    return [StreamChange("a", prune_to=2), StreamChange(MARKER, rewrite=fence)]


async def test_a_lost_reply_whose_fence_is_found_is_done(backend: RedisBackend) -> None:
    changes = await _changes(backend)
    calls = _lost_once(backend)
    assert await backend.append_together([], changes) == []  # main: BackendError
    assert calls[0] == 2
    assert [e.seq for e in await backend.read("a")] == [3, 4]
    assert await backend.head_tag(MARKER) == (1, b"f" * 16)


async def test_a_lost_reply_then_another_fence_is_still_unknown(backend: RedisBackend) -> None:
    changes = await _changes(backend)

    async def other_fence() -> None:  # (another process's, over this one's)
        head, tag = await backend.head_tag(MARKER)
        await backend.rewrite(RewriteRequest(MARKER, head, tag, head_tag=b"o" * 16))

    _lost_once(backend, other_fence)
    with pytest.raises(BackendError) as caught:
        await backend.append_together([], changes)
    assert caught.value.maybe_applied
