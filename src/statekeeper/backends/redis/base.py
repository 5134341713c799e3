"""What the parts of :class:`~.backend.RedisBackend` share: the driver (redis-py,
its absence reported once here), the logger, the scripts (``lua/``: :func:`lua`,
:data:`SCRIPTS`), the scripts' constant texts and the helpers of their arguments and
replies."""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, TypeVar

from ...errors import BackendUnavailable
from ...records import RewriteRequest
from ..framing import pack_snapshot
from ..scripts import read_script

try:
    from redis.commands.core import AsyncScript
    from redis.exceptions import ReadOnlyError, RedisClusterException, RedisError, ResponseError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailable(
        "the Redis backend needs redis-py: pip install 'statekeeper[redis]'"
    ) from exc

__all__ = [
    "SCRIPTS",
    "AsyncScript",
    "ReadOnlyError",
    "RedisClusterException",
    "RedisError",
    "ResponseError",
    "T",
    "logger",
    "lua",
]

logger = logging.getLogger("statekeeper.backends.redis")

T = TypeVar("T")

_HMGET_CHUNK = 1000

_PACKAGE = "statekeeper.backends.redis"
#: KEYS: meta. ARGV: shards. Records the number of shards unless one is recorded.
_CLAIM_LAYOUT = (
    "local cur = redis.call('HGET', KEYS[1], 'shards') "
    "if cur then return cur end "
    "redis.call('HSET', KEYS[1], 'shards', ARGV[1]) return ARGV[1]"
)
#: KEYS: hash, index. ARGV: agent, its own-ttl mark. Reply: {the hash holds a head 1|0,
#: the index's scores of its proof entry, of the agent, of the mark (or nil)}
_PROBE = (
    "return {redis.call('HEXISTS', KEYS[1], 'h'), redis.call('ZSCORE', KEYS[2], '\\0'), "
    "redis.call('ZSCORE', KEYS[2], ARGV[1]), redis.call('ZSCORE', KEYS[2], ARGV[2])}"
)
_INCLUDE = re.compile(r"^-- include: (\S+)$", re.MULTILINE)


def _holder(raw: Any) -> str | None:
    """A lease holder as a script replies it (empty: none)."""
    return bytes(raw).decode() or None


def _rewrite_fields(request: RewriteRequest) -> list[bytes | str]:
    """A rewrite as rewrite_write.lua takes it (rewrite.lua, together.lua)."""
    fields: list[bytes | str] = [
        str(request.expected_seq),
        "1" if request.expected_tag is not None else "0",
        request.expected_tag or b"",
        "1" if request.head_tag is not None else "0",
        request.head_tag or b"",
        str(len(request.events)),
        str(len(request.snapshots)),
    ]
    for e in request.events:
        fields += [str(e.seq), e.checksum, e.payload]
    for snap in request.snapshots:
        fields += [str(snap.seq), pack_snapshot(snap)]
    return fields


@functools.cache
def lua(name: str) -> str:
    """The Lua script ``lua/<name>.lua``, its ``-- include: <file>`` lines replaced by
    the shared helpers they name (``common.lua``: TTLs and formatting; ``now.lua``: the
    server's clock). Built once per process: every backend built made its ~220 KB of
    script text again (the includes repeat the helpers in each script), freed at its
    close but kept by the C allocator — a process opening and closing stores grew by
    ~6 MB of RSS that way, against ~1.5 MB once cached (2,000 cycles)."""
    return _INCLUDE.sub(
        lambda m: read_script(_PACKAGE, f"lua/{m.group(1)}").strip("\n"),
        read_script(_PACKAGE, f"lua/{name}.lua"),
    )


#: every script the backend runs, by name (``lua/<name>.lua``)
SCRIPTS = (
    "append",
    "read",
    "seq_at",
    "latest",
    "read_latest",
    "save_snapshot",
    "delete",
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "lease_carry",
    "rewrite",
    "set_ttl",
    "hold_sync",
    "prune",
    "replace_snapshot",
    "from_base",
    "together",
    "trim_feed",
    "rename_keys",
)


def _part_way(exc: BaseException) -> bool:
    """Whether ``exc`` is a script's error at one of its commands (``redis.call``),
    after which what the script wrote before stays: Redis 7 adds ``script: <sha>, on
    @user_script:<line>``, Redis 6 ``Error running script``. A script's own refusal
    (``redis.error_reply``, before any write) carries neither."""
    text = str(exc)
    return "@user_script:" in text or "Error running script" in text
