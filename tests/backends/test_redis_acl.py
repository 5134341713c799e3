"""A Redis user (ACL) that may not run a command the store's scripts run is refused
when the store is opened for writing, with nothing written — never part way through a
save (a script refused at its ``XADD`` kept the events and head it had written, and the
caller was told ``BackendRejected``, nothing written; a ``-pexpire`` user's agents of a
``ttl=`` store never expired). On a private server (the test sets users up)."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import open_backend
from statekeeper.errors import AccessDenied

from ._services import private_redis

pytestmark = pytest.mark.slow  # (a private server: the test changes its users)


async def _keys(url: str, pattern: str) -> list[bytes]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        return sorted([k async for k in client.scan_iter(match=pattern)])
    finally:
        await client.aclose()


async def _user(url: str, name: str, *rules: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await client.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", name, "on", ">pw-secret", *rules
        )
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("denied", "options", "named"),
    [
        ("-xadd", "", "XADD t:feed"),
        ("-@stream", "", "XADD t:feed"),
        ("-pexpire", "&ttl=3600", "PEXPIRE t:a:<agent>"),
    ],
)
async def test_a_user_who_may_not_run_a_scripts_command_is_refused_before_any_write(
    denied: str, options: str, named: str
) -> None:
    with private_redis() as server:
        await _user(server.url, "app", "~*", "&*", "+@all", denied)
        url = f"redis://app:pw-secret@127.0.0.1:{server.port}/0?prefix=t:{options}"
        async with StateStore(url) as store:
            with pytest.raises(AccessDenied) as caught:
                await store.save("a", {"n": 1})
            message = str(caught.value)
            assert named in message and "'app'" in message
            assert "pw-secret" not in message
            assert caught.value.principal == "app"
        assert await _keys(server.url, "t:a:*") == []  # nothing of the agent written


async def test_a_user_with_the_commands_it_needs_opens_and_writes() -> None:
    with private_redis() as server:
        # the store's keys only, and no admin commands
        await _user(server.url, "app", "~t:*", "+@all", "-@admin", "-@dangerous", "+info")
        url = f"redis://app:pw-secret@127.0.0.1:{server.port}/0?prefix=t:&ttl=3600"
        async with StateStore(url) as store:
            await store.save("a", {"n": 1})
            state: Any = await store.load("a")
            assert state.data == {"n": 1}
        read_only = f"redis://app:pw-secret@127.0.0.1:{server.port}/0?prefix=t:"
        await _user(server.url, "app", "-@write")  # a reader opens read-only
        async with StateStore(open_backend(read_only, readonly=True)) as store:
            state = await store.load("a")
            assert state.data == {"n": 1}


async def test_a_script_refused_part_way_says_the_write_may_be_applied() -> None:
    """Permissions taken away after open: the append script is refused at its ``XADD``
    (the feed) after it wrote the events and head — Redis keeps what a script wrote
    before its error. The error said ``maybe_applied=False`` (nothing written), so a
    caller took a half-applied write for a clean refusal."""
    import redis.asyncio as aioredis

    from statekeeper.errors import BackendError

    with private_redis() as server:
        await _user(server.url, "app", "~*", "&*", "+@all")
        url = f"redis://app:pw-secret@127.0.0.1:{server.port}/0?prefix=t:"
        async with StateStore(url) as store:
            await store.save("a", {"n": 1})
            await _user(server.url, "app", "-xadd")
            with pytest.raises(BackendError) as caught:
                await store.save("a", {"n": 2})
            client = aioredis.Redis.from_url(server.url)
            try:
                written = await client.hexists("t:a:a", "e:2")
            finally:
                await client.aclose()
            assert caught.value.maybe_applied or not written, (written, caught.value)
            assert "pw-secret" not in str(caught.value)
