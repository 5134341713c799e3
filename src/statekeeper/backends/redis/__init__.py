"""Redis backend (extra ``redis``): :class:`RedisBackend` (``backend.py``), its Lua
scripts in ``lua/`` (one file per script; ``common.lua`` and ``now.lua`` are helpers
that scripts include)."""

from .backend import SCRIPTS, RedisBackend, check_redis_url, lua

__all__ = ["SCRIPTS", "RedisBackend", "check_redis_url", "lua"]
