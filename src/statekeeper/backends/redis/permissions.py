"""A Redis user (ACL) that may not run every command the store's scripts run is
refused when a writable backend opens the store, before anything is written.

A script that meets a command its user may not run (``NOPERM``: ``-xadd``, ``-pexpire``,
``-@stream``, a key pattern that leaves out one of the store's keys) stops there, and
Redis keeps what it wrote before: an append's events and head were stored, its change
feed entry or its expiry not, and the caller was told the save failed with nothing
written (``BackendRejected``, ``maybe_applied`` False) — a retry then conflicted with
the write it was told had not happened, the feed had a position without its entry, and
an agent of a ``ttl=`` store never expired.

:func:`check_permissions` runs one read-only script at the first contact that asks
``redis.acl_check_cmd`` (Redis 7) about each command the scripts run, on a key of each
kind they run it on, and raises :class:`~statekeeper.errors.AccessDenied` naming the
user and every command refused. A server without ``acl_check_cmd`` (Redis 6 or older)
is not checked. Permissions taken away while the backend runs are not polled.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from redis.exceptions import ResponseError

from ...errors import AccessDenied
from .keys import Layout

__all__ = ["check_permissions", "probes"]

#: ARGV: groups of (count, command, args...). Reply: each refused group, as text.
_PROBE = """
if not redis.acl_check_cmd then return {} end
local refused, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local cmd = {}
  for j = 1, n do cmd[j] = ARGV[i + j] end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(cmd))
  if not ok or not allowed then refused[#refused + 1] = cmd[1] .. ' ' .. (cmd[2] or '') end
  i = i + n + 1
end
return refused
"""


def probes(layout: Layout, feed: bool) -> list[tuple[bytes, ...]]:
    """Each command the store's scripts run, on a key of each kind they run it on
    (shard 0's keys stand for every shard's: an ACL key pattern names the prefix)."""
    shard = layout.shard_keys[0]
    agent = shard.base + b"a:<agent>"
    snaps = shard.base + b"s:<agent>"
    lease = shard.base + b"l:<agent>"
    receipt = shard.base + b"d:<token>"
    holds = shard.base + b"holds"
    out: list[tuple[bytes, ...]] = [(b"TIME",), (b"GET", shard.epoch), (b"EXISTS", agent)]
    for h in (agent, lease):
        out += [
            (b"HGET", h, b"f"),
            (b"HMGET", h, b"f"),
            (b"HSET", h, b"f", b"v"),
            (b"HDEL", h, b"f"),
            (b"HEXISTS", h, b"f"),
        ]
    for z in (snaps, shard.index):
        out += [
            (b"ZADD", z, b"0", b"m"),
            (b"ZREM", z, b"m"),
            (b"ZSCORE", z, b"m"),
            (b"ZRANGEBYSCORE", z, b"-inf", b"+inf"),
            (b"ZREVRANGEBYSCORE", z, b"+inf", b"-inf"),
            (b"ZREMRANGEBYSCORE", z, b"-inf", b"+inf"),
        ]
    out += [
        (b"DEL", agent, snaps),
        (b"PEXPIRE", agent, b"1"),
        (b"PEXPIRE", snaps, b"1"),
        (b"PERSIST", agent),
        (b"PERSIST", snaps),
        (b"SET", receipt, b"v"),
        (b"GET", receipt),
        (b"SISMEMBER", holds, b"m"),
    ]
    if feed:
        out += [
            (b"INCRBY", shard.feed_counter, b"1"),
            (b"DECRBY", shard.feed_counter, b"1"),
            (b"DEL", shard.feed_counter),
            (b"GET", shard.feed_floor),
            (b"EXISTS", shard.feed_stream),
            (b"XINFO", b"STREAM", shard.feed_stream),
            (b"XADD", shard.feed_stream, b"0-1", b"a", b"b"),
            (b"XTRIM", shard.feed_stream, b"MINID", b"0"),
        ]
    return out


def _user(url: str) -> str:
    """The Redis user the URL logs in as (``default`` without one)."""
    try:
        name = urlsplit(url).username
    except ValueError:
        name = None
    return unquote(name) if name else "default"


async def check_permissions(client: Any, layout: Layout, feed: bool, url: str) -> None:
    """Refuse a user who may not run every command of the store's scripts (see the
    module documentation)."""
    args: list[bytes] = []
    for probe in probes(layout, feed):
        args += [b"%d" % len(probe), *probe]
    try:
        refused = await client.register_script(_PROBE)(keys=[], args=args)
    except ResponseError as exc:
        if "NOPERM" not in str(exc) and "permission" not in str(exc):
            raise
        refused = [b"EVALSHA (scripts)"]
    if not refused:
        return
    names = sorted({bytes(r).decode(errors="replace") for r in refused})
    user = _user(url)
    raise AccessDenied(
        user,
        "write",
        "open",
        reason=(
            f"the Redis user {user!r} may not run {', '.join(names)}, which the store's "
            "writes run inside one script each: a script refused part way keeps what it "
            "wrote before. Grant these commands and keys (ACL SETUSER), or open the "
            "store read-only"
        ),
    )
