"""The first contact (:meth:`~.backend.RedisBackend.open`): the server answers, then the
checks of the store met there (the key layout recorded, nesting, permissions, eviction,
the identity markers adopted, the feed, a store of record under a backend of copies);
the health check and the close."""

from __future__ import annotations

import asyncio
from typing import Any

from ...errors import BackendRejected, BackendUnavailable, ConfigurationError
from ..base import Health
from ..redact import mask_url, one_line, scrub
from . import feed, meta
from .base import _CLAIM_LAYOUT, ReadOnlyError, RedisClusterException, RedisError, ResponseError
from .client import on_node
from .engine import RedisEngine
from .eviction import check_eviction, evicting_policy, own_ttls_stored
from .keys import shard_tag
from .nesting import check_nesting
from .permissions import check_permissions

__all__ = ["RedisConnection"]


class RedisConnection(RedisEngine):
    """The first contact, health and close (a part of :class:`~.backend.RedisBackend`)."""

    async def _check_layout(self) -> None:
        """Refuse to open a store recorded with another layout (see :mod:`.keys`); a
        sharded store records its number of shards on first use. A prefix whose meta
        hash records no shards may hold a sharded store that lost it (see :mod:`.meta`):
        one is looked for first."""
        meta_key = self.layout.meta
        want = self.layout.shards
        unrecorded = not self.cluster and await self._client.hget(meta_key, b"shards") is None
        if unrecorded:
            await self._check_sharded_here(want)
        if want is not None and not self.cluster:
            # a plain server may hold a store in the plain layout: never hide it
            plain = unrecorded and await self._client.exists(self._pfx + b"agents")
            if plain:
                raise ConfigurationError(
                    f"redis prefix {self.prefix!r} holds a store in the plain key layout; "
                    "open it without shards= (statekeeper export | statekeeper import "
                    "moves it to a sharded one)"
                )
        if want is not None and not self.readonly:
            got = await self._client.eval(_CLAIM_LAYOUT, 1, meta_key, str(want))
        else:
            got = await self._client.hget(meta_key, b"shards")
        self._compare_layout(got)

    def _compare_layout(self, got: Any) -> None:
        """:class:`ConfigurationError` unless ``got`` (the meta hash's ``shards``
        field) is the layout this backend was built with (or not recorded yet)."""
        want = self.layout.shards
        recorded = int(got) if got else None
        if recorded is not None and want is None:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store in the sharded key layout; "
                f"open it with ?shards={recorded}"
            )
        if recorded is not None and recorded != want:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} was created with shards={recorded}, not "
                f"{want}: an agent's shard depends on it, so it cannot change"
            )

    async def _check_sharded_here(self, want: int | None) -> None:
        """Refuse to open, in another layout, a sharded store whose meta hash lost its
        number of shards (its shard 0 found where a sharded store keeps it; its number
        from the copy in its index, see :mod:`.meta`)."""
        mine = shard_tag(0, want) if want is not None else None
        for tag, n in (await meta.sharded_here(self._client, self.layout)).items():
            if want is not None and (n == want or (n is None and tag == mine)):
                continue
            how = f"?shards={n}" if n is not None else "the shards= it was created with"
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store in the sharded key layout "
                f"whose record of it ({self.layout.meta.decode(errors='replace')!r}) is gone "
                f"(evicted or deleted): open it with {how}"
            )

    async def open(self) -> None:
        """Check that the server answers (see ``connect_timeout``); idempotent.

        Raises :class:`~statekeeper.errors.BackendUnavailable` with the server's
        reason when it cannot be reached or refuses the connection.
        """
        self._check_open()
        if self._reached:
            return
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._client.ping()
        except TimeoutError:
            reason = f"no answer within {self.connect_timeout:g}s (connect_timeout)"
        except (RedisError, RedisClusterException, OSError) as exc:  # no node answered
            reason = one_line(scrub(str(exc), self.url)) or type(exc).__name__
        else:
            try:
                if not self.readonly:  # (before the layout's claim creates the meta hash)
                    await check_nesting(self._client, self.layout)
                await self._check_layout()
                if not self.readonly:  # (before the first write: see .permissions)
                    await check_permissions(self._client, self.layout, self.feed, self.url)
                if not self.evictable:
                    await check_eviction(self._client, self.url, self.ttl is not None)
                    await self._adopt()
                    if self.ttl is not None:  # (the store's, taken by _adopt: .eviction)
                        await check_eviction(self._client, self.url, True)
                    elif await own_ttls_stored(self._client, self.layout):  # (set_ttl's)
                        self._own_ttls = True
                        await check_eviction(self._client, self.url, True)
                if not (self.readonly or self.feed or self.evictable):  # (a copy: no feed)
                    await self._check_no_feed()
                if self.evictable and not self.readonly:
                    await self._check_not_of_record()
            except ReadOnlyError as exc:  # (a replica: its first write, the markers)
                raise BackendRejected(
                    f"cannot open the store at {mask_url(self.url)} (prefix {self.prefix!r}) "
                    "for writing: the server is a read-only replica; connect to its "
                    "master, or open the store read-only"
                ) from exc
            except ResponseError as exc:  # (a refusal: the driver's error is not ours)
                raise self._reject(f"redis cannot open prefix {self.prefix!r}", exc) from exc
            self._reached = True
            return
        # never echo the password: the message names the server by its masked URL
        raise BackendUnavailable(f"cannot connect to Redis at {mask_url(self.url)}: {reason}")

    async def _adopt(self) -> None:
        """Adopt the store's identity markers (see :mod:`.identity`). With
        ``wait_replicas``, the markers this backend created are waited for as a write
        is (best effort: a shortfall is not an error here, and any acknowledged write
        after them covers them too), so a failover to a replica does not pass for a
        lost store."""
        await self._settle_ttl()
        created = await self._identity.adopt(self._client, create=not self.readonly, feed=self.feed)
        if not self.readonly:
            await meta.copy_meta(self._client, self.layout)  # (see .meta)
        if self.wait_replicas and created:
            ms = max(1, round(self.wait_timeout * 1000))
            await asyncio.gather(
                *(
                    on_node(
                        self._client,
                        k.sync,
                        [("INCRBY", k.sync, 0), ("WAIT", self.wait_replicas, ms)],
                    )
                    for k in created
                )
            )

    async def _check_not_of_record(self) -> None:
        """A backend of copies (``evictable``: a hot tier, a cache) is refused on a
        prefix that holds a store of record (its identity marker, which only a backend
        of record creates): it checks no marker and no presence, and its writes went
        over the store's agents (a tiered store's hot tier at the default prefix
        replaced a Redis store's agent at seq 5 by its own at seq 2)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for keys in self.layout.shard_keys:
                pipe.exists(keys.epoch)
            found = await pipe.execute()
        if any(int(n) for n in found):
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store of record; a hot tier or an "
                "evictable cache keeps copies and would write over its agents: give it a "
                "prefix of its own (?prefix=...)"
            )

    async def _check_no_feed(self) -> None:
        """A writer without the feed (``feed=False``) is refused on a store that keeps
        one: its events would be missing from the feed, its followers none the wiser."""
        if await feed.keeps_feed(self._client, self.layout):
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} keeps a change feed, and a backend opened "
                "with feed=0 would leave its writes out of it (the feed's followers would "
                "miss them without an error): open it without feed=0"
            )

    async def health(self) -> Health:
        detail: dict[str, Any] = {"prefix": self.prefix}
        if self._closed:
            return Health(ok=False, backend=self.name, detail={**detail, "error": "closed"})
        try:
            await asyncio.wait_for(self._client.ping(), timeout=min(5.0, self.connect_timeout))
            info = await asyncio.wait_for(self._client.info("server"), timeout=5)
            detail["redis_version"] = info.get("redis_version")
            detail["ttl"] = self.ttl
            # a store recorded with another layout refuses every operation of this
            # backend: not healthy (a tiered backend's hot tier was reported ok so)
            got = await asyncio.wait_for(self._client.hget(self.layout.meta, b"shards"), 5)
            self._compare_layout(got)
            if not self.evictable:  # a CONFIG SET since the backend opened (.eviction)
                expiring = self._expiring
                policy = await asyncio.wait_for(evicting_policy(self._client, expiring), 5)
                if policy is not None:
                    detail["error"] = (
                        f"the server evicts {'keys' if expiring else 'any key'} when full "
                        f"({policy}): agents acknowledged as written may disappear"
                    )
                    return Health(ok=False, backend=self.name, detail=detail)
        except Exception as exc:  # health reports, it does not raise
            return Health(ok=False, backend=self.name, detail={**detail, "error": str(exc)})
        return Health(ok=True, backend=self.name, detail=detail)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        first = self._loop
        if first is not None and first.is_closed():
            # its connections belong to a loop closed under it (a LangGraph saver's own
            # loop, closed with a store it was given still open; a loop per job): they
            # cannot be closed from here, and die with it. Was: an untyped
            # RuntimeError ("Event loop is closed") from redis-py
            return
        await self._client.aclose()
