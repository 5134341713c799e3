"""S3 backend (extra ``s3``): immutable objects in any S3-compatible store.

Layout under ``s3://bucket/prefix`` (agent ids hex-encoded, which keeps S3's
lexicographic key order equal to the ids' code point order)::

    <prefix>/a/<hex id>/e/<first seq, 20 digits>   one commit: the events of one append
    <prefix>/a/<hex id>/s/<seq, 20 digits>         a snapshot
    <prefix>/a/<hex id>/k/<sha256 of the key>      an idempotency key: "first:last:key"
    <prefix>/a/<hex id>/e/b<seq, 20 digits>        the base of a compacted stream (empty)
    <prefix>/a/<hex id>/h/mark                     the high-water mark: incarnation, head
    <prefix>/m/<hex name>                          a store-level marker (Backend.read_marker)
    <prefix>/statekeeper.id                        the store's id (Backend.feed_id): 16 hex

* Commits are immutable and created with a conditional write
  (``PutObject(IfNoneMatch='*')``, honoured by AWS S3 since 2024, MinIO, Ceph RGW and
  moto). An append at ``expected_seq = N`` first checks that the newest commit ends at
  ``N`` and then creates the commit object named ``N + 1`` only if it does not exist:
  of two writers at the same head exactly one wins, the other gets a
  :class:`~statekeeper.errors.ConflictError`. Commits never overlap, because a commit
  is only ever written right after the end of an existing one.
* The commit is the atomic unit: its idempotency key and snapshot travel in it as
  metadata/reference and are written to their own objects right after. If a process
  dies in between, the key is still found on the newest commit (and re-written by the
  next append), and the snapshot is only a cache: nothing acknowledged is lost.
* A compacted stream (retention's keep-last-N, :meth:`S3Backend.prune`; a restore of
  one, :meth:`S3Backend.append_from_base`) is switched in ONE object write, since S3
  has no transaction over several objects. ``prune`` first copies the part after the
  new base of the commit spanning it into a commit of its own (reads already end each
  commit where the next begins, so the stream reads the same), then writes the base
  object ``e/b<seq>`` — from then on every read ignores what lies at or below it —
  and only then deletes that (commits, older snapshots; idempotency keys stay): a
  process killed anywhere leaves the old stream or the new one, never a mix, and the
  next prune finishes the deletions. A rewrite racing the copy is not lost: the prune
  reads the commit again after copying it (and copies it again if a rewrite changed
  it), and a rewrite lists the commits again after its writes (and rewrites a copy
  made meanwhile). ``append_from_base`` writes its first commit with
  the base snapshot inside it (a record at the base seq, which reads skip), so the
  stream and its base appear together; the snapshot's own object follows as a copy.
* A delete first *claims* the stream: an empty commit marked as a delete's, created
  (``IfNoneMatch``) at the slot the next append would take, so no append lands
  while the objects are deleted (an append at the head either wins that slot first
  or conflicts); the claim is deleted last among the commits. A process killed
  after its claim leaves the stream readable as it was; the next append or delete
  finds the claim on the newest commit and finishes the delete first.
* A rewrite (rekey, migrate, a redaction) claims the stream the same way: an empty
  commit marked as a rewrite's (its request's digest), with the newest commit's head,
  head tag and key, created at the slot the next append would take and deleted when
  the rewrite is done. While it is there every append at the head and every other
  rewrite conflicts (nothing of the loser written); the head tag is checked again once
  it is held. The claim bears the token of its attempt and the time it was made: a
  later rewrite at the same head takes it over (overwrites it, ``If-Match``, with its
  own token), and a rewrite checks its token before each of its writes, so the one
  taken over fails at its next write. A process killed during a rewrite leaves the
  claim: the next rewrite (a rekey run again) takes it over and rewrites over the
  half-done one, and an append or ``delete_agent_at`` meeting a claim older than
  ``rewrite_claim_timeout`` deletes it (``If-Match``) and proceeds. A claim's head tag
  is read from the commit under it (see :mod:`.claims`: finished claims, takers').
* Every overwrite of a commit (a rewrite, a prune's copy made again) ends its body with
  a record of its own (seq 0, which reads skip): its ETag changes even when only the
  metadata does (the head tag), so an ``If-Match`` on the ETag read catches it.
* A stream has an *incarnation*: a random id chosen by the append that creates it (the
  first after its absence), carried in the metadata of its commits and snapshots and
  of the key objects its appends write. After each commit the append overwrites the
  agent's high-water mark (``h/mark``: incarnation and head). A newest commit deleted
  by something else (a lifecycle rule, another tool) leaves the mark (or a snapshot)
  of the same incarnation above the stream: every read of the head (an append,
  ``head``, ``head_tag``...) raises :class:`~statekeeper.errors.IntegrityError`
  naming the lost seqs, instead of going back and letting the next save reuse them;
  a retry of the lost append is not answered as stored. A mark, snapshot or key
  object of another incarnation (one a deleted stream's late append left) is not this
  stream's; a stream written before incarnations gets one at its next append.
* An idempotency key object carries when its record was made (metadata ``created``,
  epoch seconds: the append's first event's timestamp; a key object written before
  that existed: its ``LastModified``). :meth:`S3Backend.expire_keys` deletes the old
  ones; the key of the newest commit, which a lookup also finds in the commit itself,
  is overwritten with an *expired* mark instead (``"0:0:"``): the mark hides it, and
  is what stops the next append from writing it back as a key object the crash of an
  append may have left unwritten. The mark goes once another commit is the newest (the
  next expiry), or when an append uses that key again.
* Every conditional write carries a token of its own in its object's metadata (``w``):
  botocore sends a request again when its reply is lost, and a retried conditional
  write meeting the object its first try made (S3 answers 412) recognises it by the
  token and succeeds, instead of reporting another writer's conflict. Retries that all
  fail raise :class:`~statekeeper.errors.BackendError` with ``maybe_applied=True``;
  so does an error S3 answers part-way through a change (a prune, a rewrite, a delete)
  once any of its writes landed (:mod:`.landed`): ``False`` only when none can have.
* Blocking boto3 calls run in a thread pool; ``endpoint_url`` selects MinIO, Ceph,
  moto or any other S3-compatible server.
* Every call costs HTTP round trips (an append: ~3–5 requests), so S3 is the cold
  (archive) tier of :class:`~statekeeper.backends.tiered.TieredBackend`; it is a
  complete backend nonetheless and passes the same conformance suite.
* A server that ignores ``If-None-Match`` (older MinIO/Ceph, some gateways) turns
  compare-and-append into last-writer-wins: on such servers use S3 only as the cold
  tier (one writer: the tiered backend's demotion) — archive-only. A store that has
  no id yet checks before making one (:meth:`S3Backend.feed_id`: a probe object
  created twice) and refuses such a server (``BackendRejected``, nothing written).

Where things live: :class:`S3Backend` (here: its settings, construction and close) is
assembled from parts, each a mixin on :class:`~.engine.S3Engine` (which declares what
the parts use of each other) with one job: the store's own objects (:mod:`.store`),
an agent's keys (:mod:`.keys`), the calls to S3 and the object operations
(:mod:`.objects`), the stream and its high-water mark (:mod:`.stream`), appends
(:mod:`.appends`), prunes (:mod:`.prune`), snapshots (:mod:`.snapshots`), a rewrite's
claim (:mod:`.claiming`) and the rewrites (:mod:`.rewrites`), deletes
(:mod:`.deletes`), idempotency keys (:mod:`.idempotency`), reads (:mod:`.reads`) and
the agents' listing (:mod:`.listing`). They stand on :mod:`.base` (the driver, the
shared metadata names) and :mod:`.layout` (what the objects hold); what a reader makes
of a rewrite's claim is in :mod:`.claims`, a rewrite's snapshots below a prune's base
in :mod:`.pruned_snapshots`, whole-object uploads for backups in :mod:`.transfer`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ...errors import ConfigurationError
from ..base import Capability, Health
from ..redact import mask_url, scrub
from .appends import S3Appends
from .base import MAX_KEY_BYTES, BotoCoreError, Config, _seconds, boto3
from .claiming import S3RewriteClaims
from .claims import TakenBy
from .deletes import S3Deletes
from .idempotency import S3IdempotencyKeys
from .keys import S3Keys
from .landed import Landed
from .listing import S3Listing
from .objects import S3Objects
from .prune import S3Prune
from .reads import S3Reads
from .rewrites import S3Rewrites
from .snapshots import S3Snapshots
from .store import S3Store
from .stream import S3Stream

__all__ = ["S3Backend"]


class S3Backend(
    S3Store,
    S3Keys,
    S3Objects,
    S3Stream,
    S3Appends,
    S3Prune,
    S3Snapshots,
    S3RewriteClaims,
    S3Rewrites,
    S3Deletes,
    S3IdempotencyKeys,
    S3Reads,
    S3Listing,
):
    """Streams and snapshots as immutable S3 objects (``s3://bucket/prefix``).

    Args:
        bucket: the bucket (must exist unless ``create_bucket``).
        prefix: key prefix for everything this backend stores.
        endpoint_url: a non-AWS endpoint (MinIO, Ceph, moto: ``http://127.0.0.1:9000``).
        region_name: the bucket's region.
        create_bucket: create the bucket on first use if it is missing.
        connect_timeout: seconds to wait for a connection to the endpoint (5).
        read_timeout: seconds to wait for each answer (15). A request is tried up to
            4 times (botocore's standard retries, with its back-off of up to 1, 2 and
            4 s between them), so a server that accepts and never answers fails a call
            after about ``4 * read_timeout + 7`` s: ``BackendUnavailable`` at the first
            use, a ``BackendError`` later. (botocore's own defaults: 60 s each.)
        rewrite_claim_timeout: seconds (600) after which a rewrite's claim on a stream
            (rekey, migrate, a redaction: see the module documentation) is taken for a
            dead process's: an append meeting an older one deletes it and lands, the
            rewrite (if it still runs) then failing with ``ConflictError``. Longer than
            any rewrite of one agent takes; clocks of the writers must agree within it.
        max_workers: threads running blocking boto3 calls.
        cache_bytes: memory for decoded immutable objects (commits, snapshots), keyed by
            key + ETag + LastModified: equal keys hold equal bytes (0 disables the cache).
            Commit metadata (the head tag) is never cached: it is not part of the ETag.
        client_options: more keyword arguments for ``boto3.client("s3", ...)``
            (credentials, ``config``...). Credentials otherwise come from the usual
            AWS chain (environment, profile, instance role).
        readonly: read only: every write raises
            :class:`~statekeeper.errors.ReadOnlyStore` before any request is sent, the
            bucket is never created (``create_bucket`` is ignored), and
            :meth:`ensure_store` raises :class:`~statekeeper.errors.NotAStore` for a
            missing bucket or a prefix holding neither statekeeper's marker
            (``<prefix>/statekeeper.meta``, written by :meth:`initialize`) nor any agent.
    """

    name = "s3"
    capabilities = frozenset(
        {
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.DROP_ALL,
            Capability.PRUNE,
            Capability.BASE_IMPORT,
            Capability.KEY_EXPIRY,
            Capability.KEY_RENAME,
        }
    )

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        create_bucket: bool = False,
        max_workers: int = 16,
        cache_bytes: int = 64 * 2**20,
        readonly: bool = False,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        rewrite_claim_timeout: float = 600.0,
        **client_options: Any,
    ) -> None:
        if not bucket:
            raise ConfigurationError("S3Backend needs a bucket name")
        self.connect_timeout = _seconds(connect_timeout, "connect_timeout")
        self.read_timeout = _seconds(read_timeout, "read_timeout")
        #: how old a rewrite's claim may be (seconds, by its maker's clock) before an
        #: append meeting it takes it for a dead process's and deletes it (see
        #: :meth:`_claim_rewrite`): longer than any rewrite of one agent runs
        self.rewrite_claim_timeout = _seconds(rewrite_claim_timeout, "rewrite_claim_timeout")
        #: the wall clock a rewrite's claim is dated by (tests set another)
        self._clock: Callable[[], float] = time.time
        self._taken_by = TakenBy()  # (the claims that took over ours: not taken back)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.readonly = readonly
        self.create_bucket = create_bucket and not readonly
        self._root = f"{self.prefix}/a/" if self.prefix else "a/"
        self._marker = f"{self.prefix}/statekeeper.meta" if self.prefix else "statekeeper.meta"
        #: the store-level markers (one empty-bodied object each; see read_marker)
        self._markers = f"{self.prefix}/m/" if self.prefix else "m/"
        #: the store's id (:meth:`feed_id`): its key family in a shared key vault
        self._id_key = f"{self.prefix}/statekeeper.id" if self.prefix else "statekeeper.id"
        #: the longest agent id (any id stored, an internal record's too) this store
        #: takes, in UTF-8 bytes: its hex form and the longest key written under it must
        #: fit in :data:`MAX_KEY_BYTES` (see :meth:`longest_key`)
        self.max_id_bytes = max(0, (MAX_KEY_BYTES - len(self.longest_key("").encode())) // 2)
        options = dict(client_options)
        ours = Config(
            retries={"max_attempts": 4, "mode": "standard"},
            max_pool_connections=max_workers,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )
        # (a config of the caller's wins where it sets something)
        given = options.get("config")
        options["config"] = ours if given is None else ours.merge(given)
        try:
            self._s3: Any = boto3.client(
                "s3", endpoint_url=endpoint_url, region_name=region_name, **options
            )
        except (BotoCoreError, ValueError) as exc:  # ("Invalid endpoint: <the URL>")
            said = scrub(str(exc), endpoint_url) if endpoint_url else str(exc)
            raise ConfigurationError(f"cannot build an S3 client: {said}") from None
        #: which writes of the call on each pool thread landed (an error part-way is
        #: ``maybe_applied`` then: :mod:`.landed`)
        self._landed = Landed(self._s3.meta.service_model)
        self._s3.meta.events.register("after-call.s3", self._landed.note)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="sk-s3")
        self._wave = max_workers
        # Objects never change under one (key, ETag, LastModified): their decoded
        # contents are cached, so a warm read costs one LIST instead of a GET per commit.
        self._cache: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._cache_lock = threading.Lock()
        #: the high-water mark the last head check of this thread read (see _raise_mark)
        self._seen_mark = threading.local()
        self._ready = False
        self._closed = False
        self._versioning: bool | None = None  # (see _versioned)

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> S3Backend:
        """``s3://bucket/prefix?endpoint_url=http://host:9000&region=eu-west-1&create_bucket=1``."""
        parts = urlsplit(url)
        if not parts.netloc:
            raise ConfigurationError(f"no bucket in {mask_url(url)!r}")
        if "@" in parts.netloc:  # (it was read as the bucket's name, secret and all)
            bucket = parts.netloc.rpartition("@")[2]
            raise ConfigurationError(
                f"s3://…@{bucket}{parts.path}: an s3:// URL takes no credentials: give them"
                " as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE,"
                " ~/.aws/credentials or an instance role"
            )
        kwargs: dict[str, Any] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key == "endpoint_url":
                kwargs["endpoint_url"] = value
            elif key in ("region", "region_name"):
                kwargs["region_name"] = value
            elif key == "create_bucket":
                kwargs["create_bucket"] = value.lower() in ("1", "true", "yes")
            elif key in ("connect_timeout", "read_timeout", "rewrite_claim_timeout"):
                try:
                    kwargs[key] = float(value)
                except ValueError:
                    kwargs[key] = value  # (refused, named, by __init__)
            elif key == "max_workers":
                try:
                    kwargs["max_workers"] = int(value)
                except ValueError as exc:
                    raise ConfigurationError(
                        f"max_workers must be an integer in {mask_url(url)!r}"
                    ) from exc
            else:
                raise ConfigurationError(f"unknown s3 option {key!r} in {mask_url(url)!r}")
        kwargs.update(overrides)
        return cls(parts.netloc, parts.path, **kwargs)

    def __repr__(self) -> str:
        where = f", endpoint_url={mask_url(self.endpoint_url)!r}" if self.endpoint_url else ""
        return f"S3Backend({self.bucket!r}, prefix={self.prefix!r}{where})"

    async def health(self) -> Health:
        detail: dict[str, Any] = {"bucket": self.bucket, "prefix": self.prefix}
        if self.endpoint_url:
            detail["endpoint_url"] = self.endpoint_url
        if self._closed:
            return Health(ok=False, backend=self.name, detail={**detail, "error": "closed"})
        try:
            await self._run(lambda: self._s3.head_bucket(Bucket=self.bucket))
        except Exception as exc:  # health reports, it does not raise
            return Health(ok=False, backend=self.name, detail={**detail, "error": str(exc)})
        return Health(ok=True, backend=self.name, detail=detail)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown, True)
        self._s3.close()
