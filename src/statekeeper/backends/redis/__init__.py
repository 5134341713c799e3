"""Redis backend (extra ``redis``): :class:`RedisBackend` (``backend.py``: the keys an
agent has and the protocols of appends, reads and retries are in its documentation) and
its parts, one job each — the store's own records and an agent's key names
(``store.py``), the first contact's checks, health and close (``connection.py``),
retries and errors (``retrying.py``), the guarded script calls and the replication
barrier (``calls.py``), expiry (``ttls.py``), appends (``appends.py``), several streams
in one script (``together.py``), snapshots, deletes, prunes, rewrites (``writes.py``),
leases (``leases.py``), idempotency keys (``idempotency.py``), reads (``reads.py``), the
agents' listing and counts (``listing.py``), the change feed's methods
(``feed_api.py``); what they stand on (``base.py``: the driver, the scripts and shared
helpers; ``engine.py``: what the parts declare of each other); its Lua scripts in
``lua/`` (one file per script; ``common.lua`` and ``now.lua`` are helpers that scripts
include)."""

from .backend import SCRIPTS, RedisBackend, check_redis_url, lua

__all__ = ["SCRIPTS", "RedisBackend", "check_redis_url", "lua"]
