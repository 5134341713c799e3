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
  is read from the commit under it (see :mod:`.s3_claims`: finished claims, takers').
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
  fail raise :class:`~statekeeper.errors.BackendError` with ``maybe_applied=True``.
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

Over 600 lines because :class:`S3Backend` implements the whole backend contract over
immutable objects (a conditional PUT stands in for compare-and-set): its appends, reads
and key layout share one object-naming scheme and one commit protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import secrets
import struct
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..errors import (
    BackendError,
    BackendRejected,
    BackendUnavailable,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidAgentId,
    NotAStore,
    ReadOnlyStore,
    StatekeeperError,
    StoreClosed,
)
from ..records import (
    STEP_KEY_PREFIX,
    AgentInfo,
    AppendRequest,
    AppendResult,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from .base import (
    Backend,
    Capability,
    Health,
    KeptKeys,
    check_expiry,
    check_prune,
    check_prune_at,
    unstored_rewrite,
    validate_from_base,
    validate_from_base_guard,
    validate_rename_guard,
    validate_request,
    validate_rewrite,
)
from .framing import pack_snapshot, unpack_snapshot
from .pruned_snapshots import lowest_pruned_snapshot, pruned_snapshot_rewrite
from .redact import mask_url, scrub
from .s3_claims import (
    FINISHED,
    WRITTEN_BY,
    TakenBy,
    claim_age,
    conflict,
    copies_after_newest,
    tip_under_claim,
)
from .s3_pruned_snapshots import drop_pruned_snapshots

try:
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]
    from botocore.exceptions import (  # type: ignore[import-untyped]
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        CredentialRetrievalError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailable("the S3 backend needs boto3: pip install 'statekeeper[s3]'") from exc

__all__ = ["S3Backend"]

T = TypeVar("T")

_EVENT = struct.Struct(">QdHHI")  # seq, ts, len(kind), len(checksum), len(payload)
_WIDTH = 20
_CONDITION_FAILED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
#: the metadata naming the write that made an object (a token of its own): a retried
#: conditional write whose first try's reply was lost recognises its own object by it
_WRITE = "w"
#: what S3 answers to credentials it does not accept (a HEAD has no body: a bare 403)
_REFUSED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "403",
}
_NO_CREDENTIALS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)
#: the metadata naming a stream's incarnation: a random id chosen by the append that
#: creates the stream (the first after its absence), carried by each of its commits,
#: snapshots, key objects and its mark; a stream written before it has none
_INC = "inc"
#: set (by the reader, never stored) on the metadata of a stream's newest commit when a
#: delete's claim lies over it that names another incarnation: a stray claim
_STRAY = "stray"
#: an agent's high-water mark (under its root): overwritten after each commit with the
#: stream's incarnation and head, so a newest commit deleted by something else (its head
#: gone back, the next save reusing its seqs) is told from a stream that never got further
_MARK = "h/mark"
#: conditional PUTs of a high-water mark other writers keep moving, before giving up
_MARK_TRIES = 16
#: the longest object key S3 takes, in UTF-8 bytes (AWS answers KeyTooLongError above;
#: MinIO, Ceph and moto may take more, but a store must move to AWS unchanged)
MAX_KEY_BYTES = 1024
#: the parts of an agent's root that are the store's: commits, mark, snapshots, keys
_AGENT_PARTS = ("e/", "h/", "s/", "k/")
#: the type of the record at the base seq in the first commit of a stream made by
#: ``append_from_base``: the base snapshot travels in the commit (reads skip it)
_BASE_RECORD = "\x00base"
#: the metadata marking a rewrite's claim (an empty commit at the slot the next append
#: would take, held for the rewrite's duration): the digest of the rewrite's request
_REWRITING = "rw"
#: the type of the record (seq 0) an overwrite of a commit adds to its body: its token
#: (see :func:`_encode_events`)
_WRITTEN = "\x00w"

# Commit PUTs of one agent are made one at a time per process: it saves requests that
# would lose anyway, and some S3 emulators (moto) check If-None-Match non-atomically.
_commit_locks: weakref.WeakValueDictionary[tuple[str, str, str], threading.Lock] = (
    weakref.WeakValueDictionary()
)
_commit_locks_guard = threading.Lock()


def _commit_lock(*key: str) -> threading.Lock:
    with _commit_locks_guard:
        lock = _commit_locks.get(key)  # type: ignore[arg-type]
        if lock is None:
            lock = threading.Lock()
            _commit_locks[key] = lock  # type: ignore[index]
        return lock


def _encode_events(events: Sequence[RawEvent], written: str = "") -> bytes:
    """A commit's body; with ``written`` (an overwrite's token) a last record of type
    :data:`_WRITTEN` holding it (reads skip it): an overwrite of a commit changes its
    bytes, hence its ETag, even when its records are the same (a rewrite of the head tag
    alone, in metadata): an ``If-Match`` on the ETag read before then catches it."""
    if written:
        events = (*events, RawEvent(0, _WRITTEN, 0.0, written.encode(), b""))
    parts: list[bytes] = []
    for e in events:
        event_type = e.type.encode()
        parts.append(
            _EVENT.pack(e.seq, e.timestamp, len(event_type), len(e.checksum), len(e.payload))
        )
        parts += (event_type, e.checksum, e.payload)
    return b"".join(parts)


def _decode_events(agent_id: str, blob: bytes) -> list[RawEvent]:
    out: list[RawEvent] = []
    at = 0
    try:
        while at < len(blob):
            seq, ts, nkind, nsum, npay = _EVENT.unpack_from(blob, at)
            at += _EVENT.size
            event_type = blob[at : at + nkind].decode()
            at += nkind
            checksum = blob[at : at + nsum]
            at += nsum
            payload = blob[at : at + npay]
            at += npay
            if len(payload) != npay:
                raise ValueError("truncated")
            # (no event has seq 0: a record of this store's own, _WRITTEN or one a
            # later version adds, its type starting with NUL)
            ours = event_type.startswith("\x00") and event_type != _BASE_RECORD
            if not (seq == 0 and ours):
                out.append(RawEvent(seq, event_type, ts, payload, checksum))
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise IntegrityError(agent_id, None, f"unreadable S3 commit object: {exc}") from exc
    return out


def _size(value: Any) -> int:
    """Approximate bytes held by a cached value."""
    if isinstance(value, list):
        return sum(len(e.payload) + len(e.checksum) + 64 for e in value)
    if isinstance(value, tuple) and value and isinstance(value[0], bytes):
        return len(value[0]) + 64
    return 256


def _key_body(first: int, last: int, key: str | None) -> bytes:
    return b"%d:%d:" % (first, last) + (key.encode() if key is not None else b"")


def _key_range(body: bytes) -> tuple[int, int]:
    first, last, _ = body.split(b":", 2)
    return int(first), int(last)


#: what an expired key object of the newest commit holds (see the module documentation)
_EXPIRED = _key_body(0, 0, None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """One listing of an agent's ``e/`` objects, read as a stream."""

    #: the live commits as (first seq, version tag), ascending: those above the base
    commits: list[tuple[int, str]]
    #: the newest base object's seq (0: none)
    base: int
    #: keys the base hides (commits at or below it, older base objects); with no live
    #: commit, every commit and base object (the leftover of an interrupted delete)
    hidden: list[str]


def _layout_of(root: str, tagged: Sequence[tuple[str, str]]) -> _Layout:
    """The stream of one listing of an agent's ``e/`` objects (``root``: their prefix)."""
    commits: list[tuple[int, str, str]] = []
    bases: list[tuple[int, str]] = []
    for key, tag in tagged:
        name = key[len(root) :]
        if name[:1] == "b":  # sorts after every commit (digits)
            bases.append((int(name[1:]), key))
        else:
            commits.append((int(name), tag, key))
    base = max((seq for seq, _ in bases), default=0)
    live = [(first, tag) for first, tag, _ in commits if first > base]
    if not live:  # no stream: what an interrupted delete left (the next creation's)
        return _Layout([], 0, [key for _, _, key in commits] + [key for _, key in bases])
    hidden = [key for first, _, key in commits if first <= base]
    hidden += [key for seq, key in bases if seq < base]
    return _Layout(live, base, hidden)


def _agent_of(hexid: str) -> str | None:
    """The agent id a key's first part under the store's ``a/`` names (its hex form),
    or None when it names none: a key of another store whose prefix lies inside this
    one's (``p/a/...`` of the store at ``p/a`` under the store at ``p``), never ours."""
    if len(hexid) % 2 or hexid.strip("0123456789abcdef"):
        return None
    try:
        return bytes.fromhex(hexid).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _agent_key(rest: str) -> bool:
    """Whether ``rest`` (a key less the store's ``a/`` root) is an agent's object:
    ``<hex id>/e|h|s|k/...``."""
    hexid, _, tail = rest.partition("/")
    return _agent_of(hexid) is not None and tail[:2] in _AGENT_PARTS


def _foreign(made: dict[str, str], tip: dict[str, str] | None) -> bool:
    """Whether an object whose metadata is ``made`` (a key object, a snapshot) is
    another incarnation's than the stream whose newest commit's metadata is ``tip``
    (None: no stream): a late write of a deleted stream's append. One without an
    incarnation (written before them, or by a restore) is not told apart."""
    inc = made.get(_INC)
    return inc is not None and (tip is None or tip.get(_INC) != inc)


def _shared_start(keys: Sequence[str]) -> str:
    """The longest string every one of ``keys`` starts with (an S3 prefix: by
    character, not by path component)."""
    low, high = min(keys), max(keys)
    n = 0
    while n < len(low) and low[n] == high[n]:
        n += 1
    return low[:n]


class _Relist(StatekeeperError):
    """A rewrite met a commit it listed deleted (a prune's): it is made again from a new
    listing (:meth:`S3Backend._rewrite_sync`)."""


def _version(obj: dict[str, Any]) -> tuple[str, str | None]:
    """What tells one write of an object from another: its ETag (its body's digest) and
    the token of the write (:data:`_WRITE`, in its metadata): a rewrite of the head tag
    alone keeps the body, hence the ETag."""
    return obj.get("ETag", ""), dict(obj.get("Metadata", {})).get(_WRITE)


def _token() -> str:
    """A write's own token, stored in its object's metadata (:data:`_WRITE`)."""
    return secrets.token_hex(8)


def _retried(exc: ClientError) -> bool:
    """Whether botocore's answer ``exc`` came to a request it had sent more than once."""
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code", "")) or str(
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def _seconds(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise ConfigurationError(f"{name} must be a number of seconds > 0, not {value!r}")
    return float(value)


class S3Backend(Backend):
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

    # -- read-only opening and ``statekeeper init`` --------------------------------------

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore(f"s3://{self.bucket}/{self.prefix} is open read-only")

    def _is_store(self) -> bool:
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND | {"NoSuchBucket"}:
                return False
            raise
        if self._head_meta(self._marker) is not None:
            return True
        page = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=self._root, MaxKeys=1)
        return bool(page.get("Contents"))

    async def ensure_store(self) -> None:
        self._check_open()
        if not await self._call(self._is_store):
            raise NotAStore(
                f"s3://{self.bucket}/{self.prefix}",
                "it holds no statekeeper data (no bucket, or nothing under the prefix); "
                "run `statekeeper init URL` to create one",
            )

    async def initialize(self) -> None:
        """Create the bucket if ``create_bucket`` and write the store's marker object."""
        self._check_writable()
        await self._run(self._put_new, self._marker, b"statekeeper")

    # -- store-level markers ---------------------------------------------------------

    def _marker_key(self, name: str) -> str:
        return self._markers + name.encode().hex()

    async def read_marker(self, name: str) -> bool | None:
        """Whether the marker object ``<prefix>/m/<hex name>`` exists (one HEAD)."""
        return await self._run(self._head_meta, self._marker_key(name)) is not None

    async def set_marker(self, name: str) -> None:
        """Create the marker object (a conditional PUT: one that exists stays as it is)."""
        self._check_writable()
        await self._run(self._put_new, self._marker_key(name), b"1")

    # -- the store's id -------------------------------------------------------------

    async def feed_id(self) -> str | None:
        """The store's id, 16 hex digits in ``<prefix>/statekeeper.id``: the key family of
        its agents' data keys in a key vault shared with other stores
        (:mod:`statekeeper.codec.keyscope`; without it an S3 store used the id-only key,
        and a ``forget`` in any store of the vault shredded the same id here). Made by
        the first call (a conditional PUT: two processes opening a new store agree on
        it); a read-only store without one has none (None). S3 keeps no change feed
        (no capability ``FEED``): nothing else reads it here."""
        return await self._run(self._store_id_sync, False)

    async def renew_feed_id(self) -> str | None:
        """Give the store a fresh id (a restore into it), durably; returns it."""
        self._check_writable()
        return await self._run(self._store_id_sync, True)

    def _store_id_sync(self, renew: bool) -> str | None:
        with _commit_lock(self.bucket, self.prefix, "statekeeper.id"):
            for _ in range(_MARK_TRIES):
                obj = self._object(self._s3.get_object, self._id_key)
                if obj is not None and not renew:
                    return self._id_of(obj["Body"].read())
                if obj is None and self.readonly:
                    return None
                if obj is None:
                    self._check_conditional_create()
                made = secrets.token_hex(8)
                if obj is None:
                    if not self._put_new(self._id_key, made.encode()):
                        continue  # another process made it first: read it
                else:
                    try:
                        self._s3.put_object(
                            Bucket=self.bucket,
                            Key=self._id_key,
                            Body=made.encode(),
                            IfMatch=obj["ETag"],
                        )
                    except ClientError as exc:
                        if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                            raise
                        continue  # renewed by another meanwhile: again
                # read back (a server checking If-None-Match loosely: the stored one)
                found = self._object(self._s3.get_object, self._id_key)
                return made if found is None else self._id_of(found["Body"].read())
        raise BackendError(
            f"{self._where()}: the store's id ({self._id_key}) kept changing", maybe_applied=True
        )

    def _check_conditional_create(self) -> None:
        """Before this store's id is made: that the server refuses a conditional create
        (``If-None-Match: *``) of an object that exists (a probe object next to the id,
        created twice, then deleted). A server that ignores the condition (older MinIO
        or Ceph, some gateways) lets two processes opening a new store each make an id
        — the last PUT stays, but the first process keeps the id it made and read back
        — and seal their agents with two key families; refused with
        :class:`~statekeeper.errors.BackendRejected`, before the id is written."""
        probe = f"{self._id_key}.check-{secrets.token_hex(8)}"
        # (a first create refused — credentials that may not write here — made nothing:
        # no delete, which such credentials are refused too, hiding why in its error)
        if not self._put_new(probe, b"1"):  # (a probe name nobody else uses)
            return
        try:
            ignored = self._put_new(probe, b"2")
        finally:
            self._delete_keys([probe])
        if ignored:
            raise BackendRejected(
                f"{self._where()}: the S3 server ignores If-None-Match (a conditional"
                " create of an object that exists succeeded): two processes opening this"
                " new store could each make a store id of their own, and appends could"
                " overwrite each other. Use a server that honours conditional writes"
                " (AWS S3, current MinIO or Ceph RGW), or S3 only as a tiered store's cold"
                " tier; nothing was written"
            )

    def _id_of(self, body: bytes) -> str:
        text = body.decode("ascii", "replace").strip()
        if len(text) != 16 or any(c not in "0123456789abcdef" for c in text):
            raise BackendError(f"{self._where()}: {self._id_key} is not a store id (16 hex digits)")
        return text

    # -- keys --------------------------------------------------------------------------

    def _agent_root(self, agent_id: str) -> str:
        """Every key of the agent's objects starts with this: an id too long for S3's
        key limit is refused here, before anything is written under it."""
        hexid = agent_id.encode().hex()
        if len(hexid) > 2 * self.max_id_bytes:
            shown = repr(agent_id if len(agent_id) <= 40 else agent_id[:40] + "…")
            longest = len(self.longest_key(agent_id).encode())
            raise InvalidAgentId(
                f"agent_id {shown} is {len(hexid) // 2:,} bytes in UTF-8, over the limit"
                f" of {self.max_id_bytes:,} of this S3 store: its longest object key would"
                f" be {longest:,} bytes, over S3's"
                f" {MAX_KEY_BYTES:,} (prefix {self.prefix!r}, the id hex-encoded)"
            )
        return self._root + hexid + "/"

    def agent_keys(self, agent_id: str) -> list[str]:
        """The longest key of each kind this backend ever writes for ``agent_id``:
        a commit, a compacted stream's base, a snapshot (at the largest seq), an
        idempotency key (its hash: every key is as long) and the high-water mark."""
        root = self._root + agent_id.encode().hex() + "/"
        seq = self._seq_name(10**_WIDTH - 1)
        return [
            root + "e/" + seq,
            root + "e/b" + seq,
            root + "s/" + seq,
            root + "k/" + self._key_hash(""),
            root + _MARK,
        ]

    def longest_key(self, agent_id: str) -> str:
        """The longest object key written for ``agent_id`` (see :meth:`agent_keys`)."""
        return max(self.agent_keys(agent_id), key=lambda k: len(k.encode()))

    @staticmethod
    def _seq_name(seq: int) -> str:
        return f"{seq:0{_WIDTH}d}"

    @staticmethod
    def _key_hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    # -- plumbing ----------------------------------------------------------------------

    def __repr__(self) -> str:
        where = f", endpoint_url={mask_url(self.endpoint_url)!r}" if self.endpoint_url else ""
        return f"S3Backend({self.bucket!r}, prefix={self.prefix!r}{where})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"s3 backend s3://{self.bucket}/{self.prefix} is closed")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        self._check_open()
        if not self._ready:
            await self._call(self._prepare)
        return await self._call(fn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args))
        except RuntimeError as exc:  # executor shut down by close()
            if self._closed:
                raise StoreClosed("s3 backend closed during an operation") from exc
            raise
        except ClientError as exc:
            if _code(exc) in _REFUSED:
                raise self._credentials_error(f"refused ({_code(exc)})") from None
            said = self._said(exc)
            raise BackendError(f"{self._where()}: {said}") from (exc if said == str(exc) else None)
        except _NO_CREDENTIALS as exc:  # nothing was sent: no request can be signed
            raise self._credentials_error(f"not found ({exc})") from None
        except BotoCoreError as exc:
            said = self._said(exc)  # (chained only when it quotes no secret)
            raise BackendError(f"{self._where()}: {said}", maybe_applied=True) from (
                exc if said == str(exc) else None
            )

    def _said(self, exc: BaseException) -> str:
        """botocore's message without the endpoint's password: a timeout or SSL error
        quotes the endpoint URL whole (``Read timeout on endpoint URL: "http://user:
        password@minio:9000/..."``)."""
        return scrub(str(exc), self.endpoint_url) if self.endpoint_url else str(exc)

    def _where(self) -> str:
        where = f" at {mask_url(self.endpoint_url)}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def _credentials_error(self, what: str) -> BackendUnavailable:
        """What a user must do when S3 will not take (or never got) credentials: the
        error names the bucket and the URL, never a secret."""
        return BackendUnavailable(
            f"{self._where()}: AWS credentials {what}: give credentials that may use "
            f"bucket {self.bucket!r} (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, ~/.aws/credentials or an instance role)"
        )

    def _prepare(self) -> None:
        if self._ready:
            return
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            # (the first contact: the server cannot be reached at all; nothing was sent)
            raise BackendUnavailable(
                f"{self._where()}: cannot connect to the S3 endpoint ({type(exc).__name__},"
                f" connect_timeout={self.connect_timeout:g} s)"
            ) from None
        except ReadTimeoutError:
            # (the first contact, a read: it connects and never answers; nothing written)
            raise BackendUnavailable(
                f"{self._where()}: the S3 endpoint accepted the connection and did not"
                f" answer within read_timeout={self.read_timeout:g} s (4 attempts)"
            ) from None
        except ClientError as exc:
            if _code(exc) not in _NOT_FOUND | {"NoSuchBucket"}:
                raise
            if not self.create_bucket:
                fix = (
                    ""
                    if self.readonly
                    else ": create it, or open the store with create_bucket=True "
                    "(?create_bucket=1 in the URL)"
                )
                raise BackendUnavailable(
                    f"{self._where()}: bucket {self.bucket!r} does not exist{fix}"
                ) from None
            try:
                self._s3.create_bucket(Bucket=self.bucket)
            except ClientError as again:
                if _code(again) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        self._ready = True

    def _list(self, prefix: str, start_after: str | None = None) -> list[str]:
        return [key for key, _ in self._list_tagged(prefix, start_after)]

    def _list_tagged(self, prefix: str, start_after: str | None = None) -> list[tuple[str, str]]:
        """(key, version tag) of every object under ``prefix``, in key order. The tag
        (ETag + LastModified) changes whenever the object is written again."""
        keys: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                keys.append((obj["Key"], f"{obj.get('ETag', '')}@{obj.get('LastModified', '')}"))
            if not page.get("IsTruncated"):
                return keys
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)

    def _cached(self, key: str, tag: str, load: Callable[[], T]) -> T:
        """``load()`` once per (key, tag); later calls come from memory (LRU, bounded
        by ``cache_bytes`` of payload)."""
        if self._cache_bytes <= 0:
            return load()
        with self._cache_lock:
            hit = self._cache.get((key, tag))
            if hit is not None:
                self._cache.move_to_end((key, tag))
                return hit[0]  # type: ignore[no-any-return]
        value = load()
        size = _size(value)
        with self._cache_lock:
            if (key, tag) not in self._cache and size <= self._cache_bytes // 4:
                self._cache[(key, tag)] = (value, size)
                self._cached_bytes += size
                while self._cached_bytes > self._cache_bytes:
                    _, (_, dropped) = self._cache.popitem(last=False)
                    self._cached_bytes -= dropped
        return value

    def _get(self, key: str) -> tuple[bytes, dict[str, str]] | None:
        obj = self._object(self._s3.get_object, key)
        return None if obj is None else (obj["Body"].read(), dict(obj.get("Metadata", {})))

    def _head_meta(self, key: str) -> dict[str, str] | None:
        obj = self._object(self._s3.head_object, key)
        return None if obj is None else dict(obj.get("Metadata", {}))

    def _object(self, call: Callable[..., dict[str, Any]], key: str) -> dict[str, Any] | None:
        """``call(Bucket=, Key=key)`` (a GET or HEAD of the object); None when there is no
        such object."""
        try:
            return call(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise

    def _put_new(self, key: str, body: bytes, metadata: dict[str, str] | None = None) -> bool:
        """Create ``key`` only if it does not exist. False if it already did (made by
        someone else: a retry meeting the object its own lost try wrote is True). The
        write's own token (:data:`_WRITE`) is the one in ``metadata``, or a new one."""
        token = (metadata or {}).get(_WRITE) or _token()
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                Metadata={**(metadata or {}), _WRITE: token},
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED:
                return self._ours(exc, key, token)
            raise
        return True

    def _ours(self, exc: ClientError, key: str, token: str) -> bool:
        """Whether the refusal ``exc`` of a conditional write of ``key`` (made with
        ``token``) met the object an earlier try of the same write made: botocore sends
        a request again when its reply was lost (a connection closed, a timeout), and
        the retry then finds the first try's object. Only a retried request is looked at
        (one HEAD)."""
        if not _retried(exc):
            return False
        meta = self._head_meta(key)
        return meta is not None and meta.get(_WRITE) == token

    # -- the stream --------------------------------------------------------------------

    def _commits(self, agent_id: str) -> list[int]:
        """First seqs of the agent's live commits, ascending."""
        return [first for first, _ in self._commits_tagged(agent_id)]

    def _commits_tagged(self, agent_id: str) -> list[tuple[int, str]]:
        return self._layout(agent_id).commits

    def _layout(self, agent_id: str) -> _Layout:
        root = self._agent_root(agent_id) + "e/"
        return _layout_of(root, self._list_tagged(root))

    def _tip_layout(
        self, agent_id: str, *, check: bool = True
    ) -> tuple[_Layout, dict[str, str] | None]:
        """The stream and its newest commit's metadata. With ``check``, a stream whose
        newest commits something else deleted raises :class:`IntegrityError` (see
        :meth:`_reached`) instead of reading as a stream that never got further."""
        layout, meta = self._tip_read(agent_id)
        inc = meta.get(_INC) if meta is not None else None
        if not check or meta is None or inc is None:  # (a stream from before incarnations)
            return layout, meta
        reached, proof = self._reached(agent_id, inc, int(meta["last"]))
        if reached <= int(meta["last"]):
            return layout, meta
        # Read after the proof (written after its commit), the stream must reach it: a
        # commit that landed between the first reading and the proof's does now.
        layout, meta = self._tip_read(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        if meta is not None and meta.get(_INC) == inc and head < reached:
            raise IntegrityError(
                agent_id,
                head + 1,
                f"events {head + 1}..{reached} are missing ({proof} of this stream,"
                f" incarnation {inc}, says it reached seq {reached}): its newest S3 commit"
                " object(s) were deleted by something other than this store; its head"
                f" would go back to {head} and the next save reuse seq {head + 1}",
            )
        return layout, meta

    def _reached(self, agent_id: str, inc: str, head: int) -> tuple[int, str]:
        """The highest seq an object written after a commit of the incarnation ``inc``
        says the stream reached, and which object: the high-water mark (one HEAD);
        when it is not at ``head`` or beyond (missing, another incarnation's, behind: a
        process died before writing it), the newest snapshot of ``inc`` above ``head``
        (one listing, of what lies above ``head`` only). A snapshot or mark of another
        incarnation is a deleted stream's leftover (a late write of its last append):
        not this stream's evidence."""
        root = self._agent_root(agent_id)
        found_mark = self._object(self._s3.head_object, root + _MARK)
        mark = dict(found_mark.get("Metadata", {})) if found_mark is not None else None
        # (what an append of this thread moves it up from: see _raise_mark)
        self._seen_mark.value = (root, found_mark["ETag"] if found_mark else None, mark)
        if mark is not None and mark.get(_INC) == inc:
            reached = int(mark.get("last") or 0)
            if reached >= head:
                return reached, "its high-water mark h/mark"
        above = self._list(root + "s/", start_after=root + "s/" + self._seq_name(head))
        for key in reversed(above):
            found = self._head_meta(key)
            if found is not None and found.get(_INC) == inc:
                seq = int(key[len(root) + 2 :])
                return seq, f"its snapshot at seq {seq}"
        return head, ""

    def _raise_mark(self, root: str, inc: str, last: int) -> None:
        """Move the high-water mark of the stream at ``root`` (incarnation ``inc``) up to
        ``last``, never down: a PUT conditional on the mark read before (``If-Match``
        its ETag: the body names incarnation and seq, so each mark's ETag is its own;
        ``If-None-Match`` when there was none). Another writer's mark landing first (a
        later commit's) is kept: this one's, late, would have taken it back, and a loss
        of that later commit then went untold. The mark this thread's head check read
        is the first guess (no request more); a refused PUT reads it again."""
        seen = getattr(self._seen_mark, "value", None)
        self._seen_mark.value = None
        known = seen[1:] if seen is not None and seen[0] == root else None
        key = root + _MARK
        for _ in range(_MARK_TRIES):
            if known is None:
                obj = self._object(self._s3.head_object, key)
                known = (obj["ETag"], dict(obj.get("Metadata", {}))) if obj else (None, None)
            etag, meta = known
            if meta is not None and meta.get(_INC) == inc and int(meta.get("last") or 0) >= last:
                return  # at this seq or beyond it already (a later commit's mark)
            condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
            try:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=f"{inc}:{last}".encode(),
                    Metadata={_INC: inc, "last": str(last)},
                    **condition,
                )
                return
            except ClientError as exc:
                if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                    raise
                known = None  # moved meanwhile (or a retry of this PUT landed): again
        # (not reached while every writer only moves it up; if it were, the mark is left
        # behind as by a process dying before it: the commit, acknowledged, is stored)

    def _tip_read(self, agent_id: str) -> tuple[_Layout, dict[str, str] | None]:
        layout = self._layout(agent_id)
        if not layout.commits:
            return layout, None
        key = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-1][0])
        # Not cached: an object's metadata (head tag, key name) is not part of its ETag, and
        # a stream deleted and re-created with the same bytes within LastModified's one
        # second would be served the old incarnation's head tag.
        meta = self._head_meta(key)
        if meta is None:  # deleted under our feet
            return self._tip_read(agent_id)
        if meta.get("tomb") and len(layout.commits) > 1:
            # a claim over another incarnation than the one it names (see _delete_at_sync)
            # is not this stream's: it reads as the commit under it, marked stray
            below = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-2][0])
            under = self._head_meta(below)
            if under is not None and under.get(_INC) != meta.get(_INC):
                return layout, {**under, _STRAY: "1"}
        if meta.get(_REWRITING) and len(layout.commits) > 1:  # (its head tag: see there)
            below = self._agent_root(agent_id) + "e/" + self._seq_name(layout.commits[-2][0])
            return layout, tip_under_claim(meta, self._head_meta(below))
        return layout, meta

    def _tip(self, agent_id: str) -> tuple[list[int], dict[str, str] | None]:
        """The live commits and the newest commit's metadata (None when there is none)."""
        layout, meta = self._tip_layout(agent_id)
        return [first for first, _ in layout.commits], meta

    def _base_sync(self, agent_id: str) -> int:
        """The seq before the agent's first stored event (0: a whole stream, or none)."""
        commits = self._layout(agent_id).commits
        return commits[0][0] - 1 if commits else 0

    @staticmethod
    def _tip_first(commits: Sequence[int], meta: dict[str, str]) -> int:
        """The first seq of the newest commit's append (a commit split by :meth:`prune`
        names it: its idempotency key covers the whole append)."""
        return int(meta.get("first", commits[-1]))

    def _head_sync(self, agent_id: str) -> int:
        _, meta = self._tip(agent_id)
        return int(meta["last"]) if meta is not None else 0

    # -- appends ----------------------------------------------------------------------

    def _append_sync(self, request: AppendRequest, base: RawSnapshot | None = None) -> AppendResult:
        """One append; with ``base``, the first one of a stream compacted at it (the
        agent must not exist; the base snapshot is written inside the commit)."""
        agent_id, key = request.agent_id, request.idempotency_key
        root = self._agent_root(agent_id)
        first, last = request.events[0].seq, request.events[-1].seq
        key_hash = self._key_hash(key) if key is not None else None
        expired = False  # the key's record expired: its append is not the retry's
        stale = False  # the key object is a deleted incarnation's (written over)
        checked: tuple[_Layout, dict[str, str] | None] | None = None
        if key_hash is not None:
            found = self._get(root + "k/" + key_hash)
            expired = found is not None and found[0] == _EXPIRED
            if found is not None and not expired:  # (kept when a prune removed its events)
                a, b = _key_range(found[0])
                made_by = found[1].get(_INC)
                if made_by is None:  # (written before incarnations, or kept by a restore)
                    return AppendResult(agent_id, a, b, duplicate=True)
                # a record of this stream only: the stream is read (raising when it lost
                # its newest commits: the record's append may be among them)
                checked = self._tip_layout(agent_id)
                if checked[1] is not None and checked[1].get(_INC) == made_by:
                    return AppendResult(agent_id, a, b, duplicate=True)
                stale = True  # a late write of a deleted stream's append: not this one's
        layout, meta = checked if checked is not None else self._tip_layout(agent_id)
        commits = [c for c, _ in layout.commits]
        if meta is not None:
            previous = meta.get("key")
            if previous is not None:
                if previous == key_hash and not expired:
                    return AppendResult(
                        agent_id, self._tip_first(commits, meta), int(meta["last"]), True
                    )
                # the key object of the newest commit may be missing after a crash
                # (an expired one holds its mark: not written back)
                name = unquote(meta.get("keyname", ""))
                self._put_new(
                    root + "k/" + previous,
                    _key_body(self._tip_first(commits, meta), int(meta["last"]), name or None),
                    {"created": meta.get("updated", "")},
                )
        head = int(meta["last"]) if meta is not None else 0
        if meta is not None and meta.get(_STRAY):  # a claim made for another incarnation
            self._withdraw_claim(agent_id, head)  # (its process may have died: see there)
        if meta is not None and meta.get("tomb"):  # a delete_agent_at claimed the stream
            self._finish_delete(agent_id)  # (its process may have died before the rest)
            layout, meta = self._tip_layout(agent_id)
            commits = [c for c, _ in layout.commits]
            head = int(meta["last"]) if meta is not None else 0
        if head != (0 if base is not None else request.expected_seq):
            raise ConflictError(agent_id, request.expected_seq, head)
        if meta is None and layout.hidden:  # a deleted stream's base: not this one's
            self._delete_keys(layout.hidden)
        created = meta["created"] if meta is not None else repr(request.events[0].timestamp)
        # the stream's incarnation: a new one for a new stream (or one written before
        # incarnations existed: from here on its lost newest commits are told)
        inc = (meta.get(_INC) if meta is not None else None) or _token()
        metadata = {
            "last": str(last),
            "created": created,
            "updated": repr(request.events[-1].timestamp),
            _INC: inc,
        }
        if request.head_tag is not None:  # the authenticated head travels with the commit
            metadata["headtag"] = request.head_tag.hex()
        if key is not None and key_hash is not None:
            metadata["key"] = key_hash
            quoted = quote(key, safe="")
            if len(quoted) <= 1024:  # S3 metadata is ASCII and at most 2 KB
                metadata["keyname"] = quoted
        records: Sequence[RawEvent] = request.events
        if base is not None:
            record = RawEvent(base.seq, _BASE_RECORD, base.timestamp, base.payload, base.checksum)
            records = (record, *request.events)
        body = _encode_events(records)
        commit_key = root + "e/" + self._seq_name(first)
        with _commit_lock(self.endpoint_url or "", self.bucket, commit_key):
            won = self._put_new(commit_key, body, metadata)
            # (a rewrite's claim older than the bound: its process died; broken, as the
            # rewrite, if it still runs, finds before its next write)
            if not won and self._break_stale_claim(commit_key, (meta or {}).get(FINISHED)):
                won = self._put_new(commit_key, body, metadata)
        if not won:  # another writer's commit (equal bytes too: ours bears our token)
            stored = self._head_meta(commit_key)
            if (
                key_hash is not None
                and stored is not None
                and stored.get("key") == key_hash
                and not stored.get(_REWRITING)  # (a rewrite's claim bears the tip's key)
            ):
                return AppendResult(agent_id, first, int(stored["last"]), True)
            raise self._conflict(agent_id, request.expected_seq, stored)
        # the high-water mark, before anything else that follows the commit (a process
        # dying before it only leaves the mark behind the stream: nothing is told then)
        self._raise_mark(root, inc, last)
        if base is not None:  # a copy: the commit holds the base already
            self._put_snapshot(agent_id, base, inc)
        if key_hash is not None:
            body = _key_body(first, last, key)
            made = {"created": repr(request.events[0].timestamp), _INC: inc}
            if expired or stale:  # over the mark of the expired record (or another's)
                self._s3.put_object(
                    Bucket=self.bucket, Key=root + "k/" + key_hash, Body=body, Metadata=made
                )
            else:
                self._put_new(root + "k/" + key_hash, body, made)
        if request.snapshot is not None:
            self._put_snapshot(agent_id, request.snapshot, inc)
        return AppendResult(agent_id, first, last)

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        self.refuse_fence(request)
        return await self._run(self._append_sync, request)

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        return await super().append_batch(requests)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """Create a stream compacted at ``base`` in one object write: its first commit,
        created only if absent (as every commit), holds the base snapshot too
        (``raise_floor``: no change feed here, nothing to raise; a ``guard`` refused:
        one object write takes no other stream's check)."""
        self._check_can_write()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        return await self._run(self._from_base_sync, request, base, tuple(kept_keys))

    def _from_base_sync(
        self, request: AppendRequest, base: RawSnapshot, kept_keys: KeptKeys
    ) -> AppendResult:
        # the kept keys first: alone (the commit refused, or never made) they are
        # found by no lookup, as a lookup of a stream that does not exist finds nothing
        root = self._agent_root(request.agent_id)
        if kept_keys and self._tip(request.agent_id)[1] is None:
            made = {"created": repr(time.time())}  # (stored now: their appends are gone)
            for name, first, last in kept_keys:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=root + "k/" + self._key_hash(name),
                    Body=_key_body(first, last, name),
                    Metadata=made,
                )
        return self._append_sync(request, base)

    def _prune_sync(self, agent_id: str, base_seq: int, drop: tuple[int, ...]) -> None:
        layout, meta = self._tip_layout(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        stored = self._latest_sync(agent_id, base_seq) if 0 < base_seq < head else None
        current = max(layout.base, layout.commits[0][0] - 1 if layout.commits else 0)
        has_base = stored is not None and stored.seq == base_seq
        check_prune(agent_id, head, base_seq, has_base, drop, current)
        commits = [c for c, _ in layout.commits]
        root = self._agent_root(agent_id)
        if base_seq >= commits[0]:
            # 1. the events after the base in a commit of their own (reads end each commit
            #    where the next one begins: the stream reads the same)
            at = max(i for i, c in enumerate(commits) if c <= base_seq + 1)
            if commits[at] != base_seq + 1:
                self._split(agent_id, commits, at, base_seq, head)
            # 2. the switch, in one object write: what lies at or below it is gone
            self._put_new(root + "e/b" + self._seq_name(base_seq), b"")
            layout = self._layout(agent_id)
        # 3. what the base hides (this prune's, or one interrupted before), and snapshots
        drop_keys: list[str] = []  # (idempotency keys stay: a retry still finds its append)
        floor = max(base_seq, layout.commits[0][0] - 1 if layout.commits else 0)
        named = set(drop)
        for key in self._list(root + "s/"):
            seq = int(key[len(root) + 2 :])
            if seq < floor or seq in named:
                drop_keys.append(key)
        # the hidden commits last: a prune killed before them leaves them listed for the
        # next one, which finds their idempotency keys through them
        self._delete_keys(drop_keys)
        self._delete_keys(layout.hidden)

    def _split(self, agent_id: str, commits: list[int], at: int, base_seq: int, head: int) -> None:
        """Write the events after ``base_seq`` of the commit ``commits[at]`` spanning it as
        the commit ``base_seq + 1`` (same metadata, plus the first seq of the append
        its idempotency key covers)."""
        root = self._agent_root(agent_id) + "e/"
        obj = self._s3.get_object(Bucket=self.bucket, Key=root + self._seq_name(commits[at]))
        end = commits[at + 1] - 1 if at + 1 < len(commits) else head
        events = [
            e
            for e in _decode_events(agent_id, obj["Body"].read())
            if base_seq < e.seq <= end and e.type != _BASE_RECORD
        ]
        metadata = dict(obj.get("Metadata", {}))
        metadata.setdefault("first", str(commits[at]))
        metadata.pop(_WRITE, None)  # (the copy's write is its own)
        self._put_new(root + self._seq_name(base_seq + 1), _encode_events(events), metadata)
        self._copy_again(agent_id, commits[at], obj, base_seq, end)

    def _copy_again(
        self, agent_id: str, first: int, obj: dict[str, Any], base_seq: int, end: int
    ) -> None:
        """After :meth:`_split` made its copy (the commit ``base_seq + 1``) of the commit
        ``first`` read as ``obj``: a rewrite of that commit in between (a rekey, a
        migration, a redaction: new records, a new head tag) lived on only in the commit
        the base hides, the rewrite answered success. The commit is read again until it
        is the one copied; when it changed, the copy is made again from it, ``If-Match``
        on the copy as read (a rewrite that listed the copy and rewrote it itself is
        never overwritten). A rewrite after this check finds the copy when it lists the
        commits again (:meth:`_rewrite_copies`)."""
        root = self._agent_root(agent_id) + "e/"
        key, copy = root + self._seq_name(first), root + self._seq_name(base_seq + 1)
        for _ in range(_MARK_TRIES):
            now = self._object(self._s3.head_object, key)
            if now is None or _version(now) == _version(obj):
                return
            obj = self._object(self._s3.get_object, key) or {}
            held = self._object(self._s3.get_object, copy)
            if not obj or held is None:
                return  # (deleted: the prune finished by another)
            events = [
                e
                for e in _decode_events(agent_id, obj["Body"].read())
                if base_seq < e.seq <= end and e.type != _BASE_RECORD
            ]
            metadata = dict(obj.get("Metadata", {}))
            metadata.setdefault("first", str(first))
            metadata[_WRITE] = token = _token()
            try:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=copy,
                    Body=_encode_events(events, token),
                    Metadata=metadata,
                    IfMatch=held["ETag"],
                )
            except ClientError as exc:
                if _code(exc) not in _CONDITION_FAILED:
                    raise
        # (rewritten again and again under the prune: nothing switched yet, retried whole)
        raise ConflictError(agent_id, end, self._head_sync(agent_id))

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history below ``base_seq`` (see :meth:`Backend.prune`). Switched by one
        object write (the base object); the deletions follow it, and an interrupted
        prune's are finished by the next one (see the module documentation). The head
        and its event's checksum, when given, are compared just before (S3 has no
        atomic step spanning the check and the switch: a stream deleted and made again
        within those requests is not caught)."""
        self._check_can_write()
        if head is not None or checksum is not None:
            current = await self.head(agent_id)
            stored = None
            if checksum is not None and current == head:
                stored = await self.head_checksum(agent_id, current)
            check_prune_at(agent_id, current, head, checksum, lambda: stored)
        await self._run(self._prune_sync, agent_id, base_seq, tuple(drop_snapshots))

    def _snapshot_key(self, agent_id: str, seq: int) -> str:
        return self._agent_root(agent_id) + "s/" + self._seq_name(seq)

    def _put_snapshot(self, agent_id: str, snapshot: RawSnapshot, inc: str | None) -> None:
        """Write a snapshot object, marked with the incarnation ``inc`` of its stream."""
        self._s3.put_object(
            Bucket=self.bucket,
            Key=self._snapshot_key(agent_id, snapshot.seq),
            Body=pack_snapshot(snapshot),
            Metadata={_INC: inc} if inc else {},
        )

    def _save_snapshot_sync(self, agent_id: str, snapshot: RawSnapshot) -> None:
        _, meta = self._tip(agent_id)
        head = int(meta["last"]) if meta is not None else 0
        if not 0 < snapshot.seq <= head:
            raise ConflictError(agent_id, snapshot.seq, head)
        self._put_snapshot(agent_id, snapshot, meta.get(_INC) if meta is not None else None)

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        await self._run(self._save_snapshot_sync, agent_id, snapshot)

    def _rewrite_sync(self, request: RewriteRequest) -> None:
        """The stream claimed (:meth:`_claim_rewrite`), then :meth:`_rewrite_listed`,
        again from the listing when a commit it listed is gone (a prune's, after its
        copy of what lies above the base): nothing of the newest commit (the head tag)
        is written before that is found; a record it names below the new base is
        refused then (:func:`~.base.unstored_rewrite`); a snapshot it wrote below a base
        a prune moved meanwhile is deleted (:mod:`.s3_pruned_snapshots`). The claim goes last."""
        key, token, head = self._claim_rewrite(request)
        try:
            for _ in range(_MARK_TRIES):
                try:
                    self._rewrite_listed(request, head, (key, token))
                    break
                except _Relist:
                    continue
            else:
                raise ConflictError(
                    request.agent_id, request.expected_seq, self._head_sync(request.agent_id)
                )
            drop_pruned_snapshots(self, request)  # (a prune under it: see there)
        except BaseException:
            with contextlib.suppress(Exception):  # (its writes cut short: the same)
                drop_pruned_snapshots(self, request)
            with contextlib.suppress(Exception):  # (the error told is the rewrite's)
                self._release_rewrite(key, token)
            raise
        self._release_rewrite(key, token)

    @staticmethod
    def _rewrite_digest(request: RewriteRequest) -> str:
        """What names a rewrite's request in its claim (for whoever inspects a claim:
        any later rewrite at the same head takes a claim over, see
        :meth:`_claim_rewrite`)."""
        digest = hashlib.sha256()

        def part(value: bytes | str | int | float | None) -> None:
            if isinstance(value, bytes):
                raw = b"b" + value
            else:
                raw = b"-" if value is None else b"+" + repr(value).encode()
            digest.update(len(raw).to_bytes(8, "big") + raw)

        for head in (request.agent_id, request.expected_seq, request.expected_tag):
            part(head)
        part(request.head_tag)
        for e in request.events:
            for field in (e.seq, e.payload, e.checksum):
                part(field)
        part(None)
        for snap in request.snapshots:
            for value in (snap.seq, snap.timestamp, snap.payload, snap.checksum):
                part(value)
        return digest.hexdigest()[:32]

    def _claim_rewrite(self, request: RewriteRequest) -> tuple[str, str, int]:
        """Claim the stream for ``request``: an empty commit marked as a rewrite's
        (:data:`_REWRITING`: its request's digest; ``at``: when, by :attr:`_clock`),
        created (``IfNoneMatch``) at the slot an append at the head would take, with the
        newest commit's metadata (head, head tag, key: the stream reads as before).
        Until it is deleted every append at the head conflicts (it cannot land after
        the head check: its events would follow a head event this rewrite replaces, its
        head tag hide this one's) unless the claim is older than
        :attr:`rewrite_claim_timeout` (:meth:`_break_stale_claim`). The head and head
        tag are checked again once the claim is held: a rewrite that ran whole between
        the first check and the claim has moved the head tag.

        A claim found there (another rewrite's, running or its process dead) is taken
        over: overwritten (``If-Match``) with this attempt's own token, which the other
        rewrite checks before each of its writes (:meth:`_hold`), failing at its next
        one. A half-done rewrite left each commit rewritten or not and the head tag
        where it was (the newest commit is written last): this rewrite, checked against
        that head, rewrites over it. One that wrote the newest commit (its head tag) and
        died before deleting its claim had finished: the claim is deleted and this
        rewrite, whose head tag is no longer the stream's, conflicts.
        Returns the claim's key, this attempt's token and the head."""
        agent_id = request.agent_id
        layout, meta = self._tip_layout(agent_id, check=False)
        if meta is not None and meta.get(_STRAY):  # a claim made for another incarnation
            self._withdraw_claim(agent_id, int(meta["last"]))  # (as an append does)
            layout, meta = self._tip_layout(agent_id, check=False)
        head = int(meta["last"]) if meta is not None else 0
        root = self._agent_root(agent_id) + "e/"
        key = root + self._seq_name(head + 1)

        def expected(found: dict[str, str] | None) -> bool:
            tag = found.get("headtag") if found is not None else None
            return (
                found is not None
                and int(found.get("last", 0)) == request.expected_seq
                and (bytes.fromhex(tag) if tag else None) == request.expected_tag
            )

        if meta is None or not expected(meta) or meta.get("tomb") or meta.get(_STRAY):
            raise ConflictError(agent_id, request.expected_seq, head)
        claim = {_REWRITING: self._rewrite_digest(request), "last": str(head)}
        claim["created"], claim["updated"] = meta["created"], meta["updated"]
        claim["first"] = str(self._tip_first([c for c, _ in layout.commits], meta))
        for name in ("headtag", _INC, "key", "keyname"):
            if name in meta:
                claim[name] = meta[name]
        claim["at"] = repr(self._clock())
        claim[_WRITE] = token = _token()
        # (the body bears the token: two writes of a claim never share an ETag)
        if meta.get(_REWRITING):  # another rewrite's (running, or its process died)
            key = root + self._seq_name(layout.commits[-1][0])
            if self._taken_by.respected(key, meta, self._clock(), self.rewrite_claim_timeout):
                raise self._conflict(agent_id, request.expected_seq, meta, head)  # (took ours)
            won = self._take_over(key, meta, claim)
        else:
            with _commit_lock(self.endpoint_url or "", self.bucket, key):
                won = self._put_new(key, _encode_events((), token), claim)
        if not won:  # an append at the head, a delete's or another rewrite's claim
            raise self._conflict(agent_id, request.expected_seq, self._head_meta(key))
        try:
            below = [first for first, _ in self._layout(agent_id).commits if first <= head]
            now = self._head_meta(root + self._seq_name(below[-1])) if below else None
            if not expected(now):
                raise ConflictError(agent_id, request.expected_seq, head)
        except BaseException:
            with contextlib.suppress(Exception):
                self._release_rewrite(key, token)
            raise
        return key, token, head

    def _take_over(self, key: str, meta: dict[str, str], claim: dict[str, str]) -> bool:
        """Overwrite the rewrite's claim at ``key`` (read as ``meta``) with ``claim``,
        only if it is still that claim (``If-Match`` on its ETag: every write of a claim
        has a body of its own); False if something else changed it first."""
        found = self._object(self._s3.head_object, key)
        if found is None or dict(found.get("Metadata", {})).get(_WRITE) != meta.get(_WRITE):
            return False
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=_encode_events((), claim[_WRITE]),
                Metadata=claim,
                IfMatch=found["ETag"],
            )
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED | _NOT_FOUND:
                return self._ours(exc, key, claim[_WRITE])
            raise
        self._drop_older_versions([key])
        return True

    def _hold(self, request: RewriteRequest, held: tuple[str, str]) -> None:
        """Before each write of a rewrite: its claim ``held`` (key, token) is still its
        own, else :class:`ConflictError` and nothing more written (another rewrite took
        it over, an append broke it as stale, a delete erased it)."""
        found = self._head_meta(held[0])
        if found is None or found.get(_WRITE) != held[1]:
            self._taken_by.note(held[0], found)  # (taken over: not taken back)
            raise self._conflict(request.agent_id, request.expected_seq, found)

    def _conflict(
        self, agent_id: str, expected: int, found: dict[str, str] | None, head: int | None = None
    ) -> ConflictError:
        """:func:`.s3_claims.conflict` (the stored head read now unless ``head`` is given)."""
        head = self._head_sync(agent_id) if head is None else head
        return conflict(agent_id, expected, head, found, self._clock(), self.rewrite_claim_timeout)

    def _break_stale_claim(self, key: str, finished: str | None = None) -> bool:
        """A rewrite's claim at ``key`` older than :attr:`rewrite_claim_timeout` (or
        undated) is taken for a dead process's and deleted (``If-Match`` on the claim as
        read: a take-over since is kept), and one still bearing the token ``finished``
        (see :mod:`.s3_claims`). True if it was deleted."""
        found = self._object(self._s3.head_object, key)
        meta = dict(found.get("Metadata", {})) if found is not None else {}
        if found is None or not meta.get(_REWRITING):
            return False
        done = finished is not None and meta.get(_WRITE) == finished
        if not done and claim_age(meta, self._clock()) <= self.rewrite_claim_timeout:
            return False
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=key, IfMatch=found["ETag"])
        except ClientError as exc:
            if _code(exc) in _CONDITION_FAILED:
                return False
            if _code(exc) not in _NOT_FOUND:
                raise
        self._drop_older_versions([key])
        return True

    def _release_rewrite(self, key: str, token: str) -> None:
        """Delete the rewrite's claim ``key`` if it is still the one it made (``token``):
        a delete may have erased it, and another stream's object taken its place."""
        found = self._object(self._s3.head_object, key)
        if found is None or dict(found.get("Metadata", {})).get(_WRITE) != token:
            return
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=key, IfMatch=found["ETag"])
        except ClientError as exc:
            if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                raise
        self._drop_older_versions([key])

    def _rewrite_listed(self, request: RewriteRequest, head: int, held: tuple[str, str]) -> None:
        """The rewrite of the live commits up to ``head`` (the claim ``held`` lies above
        it, checked before each write: :meth:`_hold`)."""
        agent_id = request.agent_id
        root = self._agent_root(agent_id) + "e/"
        commits = [first for first in self._commits(agent_id) if first <= head]
        if not commits:  # (deleted since the claim)
            raise ConflictError(agent_id, request.expected_seq, 0)
        meta = self._head_meta(root + self._seq_name(commits[-1]))
        if meta is None:
            raise _Relist  # (pruned since the listing)
        if int(meta.get("last", 0)) != head:
            raise ConflictError(agent_id, request.expected_seq, self._head_sync(agent_id))
        changes = {e.seq: e for e in request.events}
        if changes and min(changes) < commits[0]:  # (the live commits begin after the base)
            raise unstored_rewrite(agent_id, min(changes), commits[0] - 1)
        if (low := lowest_pruned_snapshot(request, commits[0] - 1)) is not None:
            raise pruned_snapshot_rewrite(agent_id, low, commits[0] - 1)  # (pruned)
        touched: list[int] = []
        for i, first in enumerate(commits):
            end = commits[i + 1] - 1 if i + 1 < len(commits) else head
            if any(first <= seq <= end for seq in changes):
                touched.append(first)
        base = next((s for s in request.snapshots if s.seq == commits[0] - 1), None)
        if base is not None and commits[0] not in touched:
            touched.insert(0, commits[0])  # it may hold the base snapshot (append_from_base)
        last = commits[-1]
        if request.head_tag is not None and last not in touched:
            touched.append(last)
        # the newest commit carries the head tag: it is written last, after the others
        # and the snapshots, each with If-Match so a concurrent rewrite is detected
        for first in sorted(touched, key=lambda f: f == last):
            if first == last:  # (the copies made meanwhile first: see copies_after_newest)
                self._rewrite_copies(request, commits, changes, head, held)
                self._hold(request, held)
                for snap in request.snapshots:
                    self._put_snapshot(agent_id, snap, meta.get(_INC))
            key = root + self._seq_name(first)
            obj = self._object(self._s3.get_object, key)
            if obj is None:
                raise _Relist  # (pruned since the listing: its records moved or gone)
            self._hold(request, held)  # (after the read: a take-over before it is seen)
            events = [
                (
                    dataclasses.replace(e, payload=base.payload, checksum=base.checksum)
                    if base is not None
                    else e
                )
                if e.type == _BASE_RECORD
                else dataclasses.replace(
                    e, payload=changes[e.seq].payload, checksum=changes[e.seq].checksum
                )
                if e.seq in changes
                else e
                for e in _decode_events(agent_id, obj["Body"].read())
            ]
            metadata = dict(obj.get("Metadata", {}))
            if first == last and request.head_tag is not None:
                metadata["headtag"] = request.head_tag.hex()
            metadata[WRITTEN_BY] = held[1]  # (its newest: a finished rewrite's, see there)
            metadata[_WRITE] = token = _token()
            try:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=_encode_events(events, token),
                    Metadata=metadata,
                    IfMatch=obj["ETag"],
                )
            except ClientError as exc:
                if _code(exc) not in _CONDITION_FAILED:
                    raise
                if not self._ours(exc, key, token):  # (ours: a retry after a lost reply)
                    if self._object(self._s3.head_object, key) is None:
                        raise _Relist from exc  # (pruned since it was read)
                    head = self._head_sync(agent_id)
                    raise ConflictError(agent_id, request.expected_seq, head) from exc
            # (each key's replaced bytes gone as soon as it is written: a rewrite cut
            # short leaves none behind but the one being written)
            self._drop_older_versions([key])
        copies_after_newest(self, request, commits, changes, head, held)
        if last not in touched:
            self._hold(request, held)
            for snap in request.snapshots:
                self._put_snapshot(agent_id, snap, meta.get(_INC))
        self._drop_older_versions([self._snapshot_key(agent_id, s.seq) for s in request.snapshots])

    def _rewrite_copies(
        self,
        request: RewriteRequest,
        listed: list[int],
        changes: dict[int, RawEvent],
        head: int,
        held: tuple[str, str],
    ) -> None:
        """After :meth:`_rewrite_listed` wrote the commits it ``listed``: a commit made since
        at or below ``head`` is a prune's copy of one of them (:meth:`_split`), which
        reads end the older commit at, and the base then hides: one made from the bytes
        before this rewrite kept the old records and head tag live, this rewrite
        answered success. Such a copy is rewritten too (``If-Match`` on it as read);
        one the prune makes after this listing, the prune makes again from the rewritten
        commit (:meth:`_copy_again`)."""
        agent_id = request.agent_id
        root = self._agent_root(agent_id) + "e/"
        for _ in range(_MARK_TRIES):
            firsts = self._commits(agent_id)
            moved = False
            for i, first in enumerate(firsts):
                end = firsts[i + 1] - 1 if i + 1 < len(firsts) else head
                tag = request.head_tag if first <= head <= end else None
                if first in listed or first > head:
                    continue
                if tag is None and not any(first <= seq <= end for seq in changes):
                    continue
                obj = self._object(self._s3.get_object, root + self._seq_name(first))
                if obj is None:
                    moved = True  # (deleted: by a prune after it; listed again)
                    continue
                stored = _decode_events(agent_id, obj["Body"].read())
                events = [
                    dataclasses.replace(
                        e, payload=changes[e.seq].payload, checksum=changes[e.seq].checksum
                    )
                    if e.seq in changes and e.type != _BASE_RECORD
                    else e
                    for e in stored
                ]
                metadata = dict(obj.get("Metadata", {}))
                if events == stored and (tag is None or metadata.get("headtag") == tag.hex()):
                    continue
                if tag is not None:
                    metadata["headtag"] = tag.hex()
                self._hold(request, held)
                metadata[_WRITE] = token = _token()
                try:
                    self._s3.put_object(
                        Bucket=self.bucket,
                        Key=root + self._seq_name(first),
                        Body=_encode_events(events, token),
                        Metadata=metadata,
                        IfMatch=obj["ETag"],
                    )
                except ClientError as exc:
                    if _code(exc) not in _CONDITION_FAILED:
                        raise
                    moved = True
                    continue
                self._drop_older_versions([root + self._seq_name(first)])
            if not moved:
                return
        raise ConflictError(agent_id, request.expected_seq, self._head_sync(agent_id))

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace record bytes: the stream claimed first (no append or other rewrite
        lands until it is done: see the module documentation), each affected commit
        object is rewritten with a conditional PUT (``If-Match``), the newest one
        (which carries the head tag) last, and the claim deleted. S3 has no
        multi-object transaction: an interrupted rewrite leaves some records rewritten
        and others not (each one valid), and its claim; running it again finishes it."""
        self._check_can_write()
        validate_rewrite(request)
        await self._run(self._rewrite_sync, request)

    def _versioned(self) -> bool:
        """Whether the bucket keeps older versions (versioning enabled or suspended, an
        object lock): asked once per backend, at its first delete."""
        if self._versioning is None:
            try:
                reply = self._s3.get_bucket_versioning(Bucket=self.bucket)
            except ClientError as exc:
                if _code(exc) not in ("AccessDenied", "NotImplemented"):
                    raise
                # (not allowed to ask: plain deletes, as on a bucket never versioned)
                reply = {}
            self._versioning = reply.get("Status") in ("Enabled", "Suspended")
        return self._versioning

    def _delete_keys(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` in their order, 1,000 per request; on a versioned bucket every
        version of each (a plain delete there only adds a delete marker): the older
        versions first, each key's current one (version or delete marker) after all of
        them — deleting a current version makes the next older one current, so an erase
        cut short there served an overwritten record (a commit from before a rekey, in
        clear) or an earlier incarnation's object as the agent's."""
        if keys and self._versioned():
            older, current = self._versions_of(keys)
            self._delete_objects(older)
            self._delete_objects(current)
        else:
            self._delete_objects([{"Key": k} for k in keys])

    def _drop_older_versions(self, keys: Sequence[str]) -> None:
        """On a versioned bucket, delete every version of ``keys`` but the current one:
        an overwrite (a rewrite's commits and snapshots: rekey, a schema migration)
        keeps the bytes it replaced as an older version, readable by anyone allowed to
        list versions — a store encrypted by ``rekey`` kept every record in clear."""
        if keys and self._versioned():
            self._delete_objects(self._versions_of(keys)[0])

    def _versions_of(
        self, keys: Sequence[str]
    ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        """Every version and delete marker of ``keys`` (one listing of their common
        prefix): those that are not current, then the current one of each in the keys'
        order (a key with none listed: deleted plainly)."""
        wanted = set(keys)
        older: list[dict[str, str]] = []
        current: dict[str, dict[str, str]] = {}
        pages = self._s3.get_paginator("list_object_versions").paginate(
            Bucket=self.bucket, Prefix=_shared_start(keys)
        )
        for page in pages:
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if v["Key"] in wanted:
                    entry = {"Key": v["Key"], "VersionId": v["VersionId"]}
                    if v.get("IsLatest"):
                        current[v["Key"]] = entry
                    else:
                        older.append(entry)
        return older, [current.get(k, {"Key": k}) for k in keys]

    def _delete_objects(self, objects: Sequence[dict[str, str]]) -> None:
        for i in range(0, len(objects), 1000):
            reply = self._s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": list(objects[i : i + 1000]), "Quiet": True},
            )
            # S3 answers 200 with the keys it did not delete (AccessDenied, object lock...)
            if errors := reply.get("Errors"):
                first = errors[0]
                raise BackendError(
                    f"{self._where()}: S3 did not delete {len(errors)} object(s), e.g."
                    f" {first.get('Key')!r}: {first.get('Code')} ({first.get('Message')})",
                    maybe_applied=True,
                )

    def _erase_sync(self, agent_id: str) -> None:
        """Delete every object of ``agent_id``, as listed now."""
        root = self._agent_root(agent_id)
        # (only its e/, h/, s/ and k/ objects: anything else under its root is not ours)
        keys = [k for k in self._list(root) if k[len(root) : len(root) + 2] in _AGENT_PARTS]
        # commits last, base objects after them: an interrupted delete leaves a
        # readable (shorter) agent, or a base object the next first append removes
        keys.sort(key=lambda k: (k.startswith(root + "e/"), k.startswith(root + "e/b")))
        self._delete_keys(keys)

    def _delete_sync(self, agent_id: str) -> bool:
        """See :meth:`delete_agent`: the stream claimed at its head (as
        :meth:`delete_agent_at`), then deleted; an append winning the claim's slot first
        is deleted with it (the claim is tried again after it)."""
        while True:
            # (unchecked: a stream that lost its newest commits can still be deleted)
            _, meta = self._tip_layout(agent_id, check=False)
            if meta is None:  # no stream (an interrupted delete may have left objects)
                self._erase_sync(agent_id)
                return False
            head = int(meta["last"])
            # (a stray claim holds off appends as well as this one's would)
            # (a rewrite's claim: the delete wins, the rewrite fails on the deleted objects)
            claimed = meta.get("tomb") or meta.get(_STRAY) or meta.get(_REWRITING)
            if claimed or self._claim(agent_id, head, meta):
                self._finish_delete(agent_id)
                return True

    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent's stream: True if it had one. Claimed first, as in
        :meth:`delete_agent_at` (an append that wins the claim's slot is deleted with
        the stream, the claim made after it), so no append lands while its objects are
        deleted (one landing after the listing used to survive alone: a stream
        starting at its seq, with no base to read its state from)."""
        self._check_writable()
        return await self._run(self._delete_sync, agent_id)

    def _delete_at_sync(self, agent_id: str, head: int, checksum: bytes | None = None) -> bool:
        """See :meth:`delete_agent_at`."""
        layout, meta = self._tip_layout(agent_id)
        if meta is not None and meta.get(_REWRITING):  # a dead rewrite's, when stale
            claim = self._agent_root(agent_id) + "e/" + self._seq_name(int(meta["last"]) + 1)
            if self._break_stale_claim(claim, meta.get(FINISHED)):
                layout, meta = self._tip_layout(agent_id)
        current = int(meta["last"]) if meta is not None else 0
        held = ""  # the commit holding the head record this delete names
        if checksum is not None and meta is not None and current == head:
            held = self._identified(agent_id, head, checksum, meta, layout)
        if meta is not None and meta.get(_STRAY) and current == head:
            self._withdraw_claim(agent_id, head)  # (another incarnation's: see below)
        if not (meta is not None and meta.get("tomb") and current == head):
            if meta is None or current != head:
                raise ConflictError(agent_id, head, current)
            if not self._claim(agent_id, head, meta):
                # an append at this head won the slot (or a try of this claim did)
                _, meta = self._tip_layout(agent_id)
                current = int(meta["last"]) if meta is not None else 0
                if not (meta is not None and meta.get("tomb") and current == head):
                    raise self._conflict(agent_id, head, meta, current)
            elif held and self._claim_is_stray(held, meta):
                # the agent deleted and written again up to ``head`` between the
                # identity check and the claim (S3 cannot make a write conditional on
                # another object): the claim lies over the new stream; withdrawn
                self._withdraw_claim(agent_id, head)
                raise ConflictError(agent_id, head, head)
        self._finish_delete(agent_id)
        return True

    def _identified(
        self, agent_id: str, head: int, checksum: bytes, meta: dict[str, str], layout: _Layout
    ) -> str:
        """The key of the commit holding ``head`` (in ``layout``, below any claim at
        ``head + 1``), unless it is not of the incarnation ``meta`` names (the newest
        commit's, read with ``layout``: a claim names its stream's) or its event at
        ``head`` has not ``checksum``: then :class:`~statekeeper.errors.ConflictError`
        (the agent was deleted and written again up to ``head``: another head record)."""
        commits = [first for first, _ in layout.commits if first <= head]
        if not commits:
            raise ConflictError(agent_id, head, 0)
        key = self._agent_root(agent_id) + "e/" + self._seq_name(commits[-1])
        found = self._get(key)
        if found is None or found[1].get(_INC) != meta.get(_INC):
            raise ConflictError(agent_id, head, head)
        sums = [e.checksum for e in _decode_events(agent_id, found[0]) if e.seq == head]
        if sums != [checksum]:
            raise ConflictError(agent_id, head, head)
        return key

    def _withdraw_claim(self, agent_id: str, head: int) -> None:
        """Delete the claim at ``head + 1`` that lies over another incarnation than the
        one it names (made for a stream deleted and written again up to ``head``; its
        process may have died before withdrawing it) — only while that object is still
        an empty claim (If-Match on its ETag): an append's commit put there since is
        kept. Appends at ``head`` conflict while it is there."""
        key = self._agent_root(agent_id) + "e/" + self._seq_name(head + 1)
        found = self._object(self._s3.head_object, key)
        if found is None or not dict(found.get("Metadata", {})).get("tomb"):
            return
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=key, IfMatch=found["ETag"])
        except ClientError as exc:
            if _code(exc) not in _CONDITION_FAILED | _NOT_FOUND:
                raise

    def _claim_is_stray(self, held: str, claim: dict[str, str]) -> bool:
        """Whether a claim of incarnation ``claim[_INC]`` lies over another stream than
        the one whose commit ``held`` (holding the head) it was made for: that commit
        is gone (a delete erases every commit) or of another incarnation now."""
        below = self._head_meta(held)
        return below is None or below.get(_INC) != claim.get(_INC)

    def _claim(self, agent_id: str, head: int, meta: dict[str, str]) -> bool:
        """Create the claim of a delete of the stream at ``head`` (``meta``: its newest
        commit's): an empty commit marked as a delete's, at the slot an append at
        ``head`` would take. False when that slot is taken already."""
        claim = {"last": str(head), "tomb": "1", "created": meta["created"]}
        claim["updated"] = meta["updated"]
        if "headtag" in meta:  # the head is still the stream's, authenticated as before
            claim["headtag"] = meta["headtag"]
        if _INC in meta:  # (the stream's, to its end)
            claim[_INC] = meta[_INC]
        key = self._agent_root(agent_id) + "e/" + self._seq_name(head + 1)
        with _commit_lock(self.endpoint_url or "", self.bucket, key):
            return self._put_new(key, _encode_events(()), claim)

    def _finish_delete(self, agent_id: str) -> None:
        """Delete a claimed stream (the claim, its newest commit, goes last among the
        commits: until then it holds off every append)."""
        self._erase_sync(agent_id)

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete ``agent_id`` only if its head is still ``head``
        (:meth:`Backend.delete_agent_at`). S3 has no transaction over several objects, so
        the delete first *claims* the stream: it creates the commit object an append at
        ``head`` would create next (``head + 1``, conditional: ``IfNoneMatch``), empty and
        marked as a delete's. Of the claim and an append at that head exactly one wins:
        a losing claim is a :class:`~statekeeper.errors.ConflictError` with nothing
        deleted (the default compared the head, then deleted whatever was there — an
        append landing between the two was deleted with the agent). The won claim then
        deletes the stream, itself last among the commits; until it is gone the stream
        reads as before (head ``head``) and every append conflicts. A process that dies
        after its claim leaves it to the next writer: an append (or this delete sent
        again) finds the claim on the newest commit and finishes the delete first.

        With ``checksum`` (the head event's, as read), the commit holding ``head`` is
        read first: another checksum or incarnation is a ConflictError. The claim names
        that incarnation; once it is won, the commit under it is looked at again, and a
        claim lying over another incarnation (the agent deleted and written again up to
        ``head`` between the two) is withdrawn: a ConflictError, nothing deleted. Until
        it is withdrawn appends at ``head`` conflict (loud), and none finishes its
        delete; a process dying in between leaves the agent refusing appends at that
        head until it is deleted (``statekeeper delete``)."""
        self._check_can_write()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        return await self._run(self._delete_at_sync, agent_id, head, checksum)

    def _drop_all_sync(self, delete_bucket: bool) -> int:
        # (only agents' objects: a store whose prefix lies inside ours keeps its own)
        keys = [k for k in self._list(self._root) if _agent_key(k[len(self._root) :])]
        # the agents: those with a commit (``<root><hex id>/e/...``), as other engines count
        agents = {k[len(self._root) :].split("/", 1)[0] for k in keys if "/e/" in k}
        self._delete_keys(keys + self._list(self._markers))
        if delete_bucket:
            self._s3.delete_bucket(Bucket=self.bucket)
            self._ready = False
        return len(agents)

    async def drop_all(self, *, delete_bucket: bool = False) -> int:
        """Delete every object under this backend's prefix (tests, benchmarks): the
        agents' and the store-level markers (the store's own ``statekeeper.meta``
        stays); and the bucket too when asked (it must then hold nothing else). Returns
        how many agents there were (as every engine does; it used to be how many of
        their objects)."""
        self._check_writable()
        return await self._run(self._drop_all_sync, delete_bucket)

    # -- reads ------------------------------------------------------------------------

    def _lookup_sync(self, agent_id: str, key: str) -> AppendResult | None:
        root = self._agent_root(agent_id)
        key_hash = self._key_hash(key)
        found = self._get(root + "k/" + key_hash)
        if found is not None and found[0] == _EXPIRED:
            return None  # (the newest commit's key, expired)
        tip: tuple[list[int], dict[str, str] | None] | None = None
        if found is not None:  # (kept when a prune removed its events)
            a, b = _key_range(found[0])
            if _INC not in found[1]:  # (written before incarnations, or kept by a restore)
                return AppendResult(agent_id, a, b, duplicate=True)
            tip = self._tip(agent_id)
            if not _foreign(found[1], tip[1]):
                return AppendResult(agent_id, a, b, duplicate=True)
            # a late write of a deleted stream's append (as _append_sync tells it)
        commits, meta = tip if tip is not None else self._tip(agent_id)
        if meta is not None and meta.get("key") == key_hash:
            first = self._tip_first(commits, meta)
            return AppendResult(agent_id, first, int(meta["last"]), duplicate=True)
        return None

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        return await self._run(self._lookup_sync, agent_id, key)

    def _keys_sync(self, agent_id: str) -> list[tuple[str, int, int]]:
        root = self._agent_root(agent_id) + "k/"
        commits, meta = self._tip(agent_id)
        out: list[tuple[str, int, int]] = []
        expired = False
        for name in self._list(root):
            found = self._get(name)
            if found is None or _foreign(found[1], meta):  # (a deleted stream's late write)
                continue
            if found[0] == _EXPIRED:
                expired = expired or (meta is not None and name == root + meta.get("key", ""))
                continue
            first, last, raw = found[0].split(b":", 2)
            if raw:
                out.append((raw.decode(), int(first), int(last)))
        if meta is not None and meta.get("keyname") and not expired:
            name = unquote(meta["keyname"])
            if all(k != name for k, _, _ in out):
                out.append((name, self._tip_first(commits, meta), int(meta["last"])))
        return sorted(out, key=lambda k: k[1])

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        return await self._run(self._keys_sync, agent_id)

    def _expire_sync(self, agent_id: str, before: float, count_only: bool) -> int:
        """One agent's :meth:`expire_keys`: each key object's time read (a HEAD each),
        the old ones deleted but a durable step's (a GET of each old one reads its
        key), the newest commit's marked expired (see the module documentation); the
        marks of keys no longer the newest commit's deleted."""
        root = self._agent_root(agent_id) + "k/"
        _, meta = self._tip(agent_id)
        tip = root + meta["key"] if meta is not None and meta.get("key") else None
        old: list[str] = []
        marks: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root}
        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                name = obj["Key"]
                meta_of = self._head_meta(name) or {}
                if meta_of.get("expired"):
                    if name != tip:
                        marks.append(name)
                    continue
                made = meta_of.get("created")
                stamp = float(made) if made else obj["LastModified"].timestamp()
                if stamp < before and not self._kept_key(name, tip, meta):
                    old.append(name)
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        if count_only:
            return len(old)
        for name in old:
            if name == tip:
                self._s3.put_object(
                    Bucket=self.bucket, Key=name, Body=_EXPIRED, Metadata={"expired": "1"}
                )
                self._drop_older_versions([name])  # (the expired record's bytes)
        self._delete_keys([name for name in old if name != tip] + marks)
        return len(old)

    def _kept_key(self, name: str, tip: str | None, meta: dict[str, str] | None) -> bool:
        """Whether the key object ``name`` is one ``expire_keys`` keeps: a durable
        step's record (its body names its key; a body written back without it, the
        newest commit's, is named by the commit), or one whose key is not known."""
        found = self._get(name)
        if found is None:
            return True  # (gone meanwhile: nothing to expire)
        key = found[0].split(b":", 2)[2].decode() if found[0].count(b":") >= 2 else ""
        if not key and name == tip and meta is not None:
            key = unquote(meta.get("keyname", ""))
        return not key or key.startswith(STEP_KEY_PREFIX)

    def _expire_all_sync(self, agent_id: str | None, before: float, count_only: bool) -> int:
        if agent_id is not None:
            return self._expire_sync(agent_id, before, count_only)
        total, after = 0, None
        while True:
            ids = self._agent_ids(after, 1000)
            for one in ids:
                total += self._expire_sync(one, before, count_only)
            if len(ids) < 1000:
                return total
            after = ids[-1]

    def _rename_keys_sync(self, agent_id: str, renames: list[tuple[str, str]]) -> int:
        """Each record's new key object written (only if absent) before its old one
        goes: a process killed in between leaves both, never neither. The old object of
        the newest commit's key is overwritten with the expired mark instead (the
        commit names that key: deleted, the next append would write it back)."""
        root = self._agent_root(agent_id) + "k/"
        commits, meta = self._tip(agent_id)
        tip = root + meta["key"] if meta is not None and meta.get("key") else None
        done = 0
        for old, new in renames:
            name = root + self._key_hash(old)
            found = self._get(name)
            made = {"created": meta.get("updated", "")} if meta is not None else {}
            if found is not None and found[0] != _EXPIRED:
                first, last = _key_range(found[0])
                made = {k: v for k, v in found[1].items() if k in ("created", _INC)}
            elif found is None and name == tip and meta is not None:
                first, last = self._tip_first(commits, meta), int(meta["last"])
            else:
                continue  # not stored (or expired)
            done += self._put_new(root + self._key_hash(new), _key_body(first, last, new), made)
            if name == tip:
                self._s3.put_object(
                    Bucket=self.bucket, Key=name, Body=_EXPIRED, Metadata={"expired": "1"}
                )
                self._drop_older_versions([name])  # (the record under its old name)
            else:
                self._delete_keys([name])
        return done

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Store records under another form of their key (see :meth:`_rename_keys_sync`:
        new before old, S3 having no transaction over several objects; a ``guard`` is
        refused: no ``guards_renames``)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        return await self._run(self._rename_keys_sync, agent_id, list(renames))

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Forget the idempotency records made before ``before``: per agent a listing
        of its key objects and a HEAD of each (S3 is the cold tier: a maintenance pass,
        not a hot path)."""
        before = check_expiry(agent_id, before)
        if not count_only:
            self._check_can_write()
        return await self._run(self._expire_all_sync, agent_id, before, count_only)

    async def head(self, agent_id: str) -> int:
        return await self._run(self._head_sync, agent_id)

    def _head_tag_sync(self, agent_id: str) -> tuple[int, bytes | None]:
        _, meta = self._tip(agent_id)
        if meta is None:
            return 0, None
        tag = meta.get("headtag")
        return int(meta["last"]), bytes.fromhex(tag) if tag else None

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        return await self._run(self._head_tag_sync, agent_id)

    def _commit_events(self, agent_id: str, first: int, tag: str = "") -> list[RawEvent]:
        key = self._agent_root(agent_id) + "e/" + self._seq_name(first)

        def load() -> list[RawEvent]:
            found = self._get(key)
            if found is None:
                raise IntegrityError(agent_id, first, "commit object vanished while reading")
            return [e for e in _decode_events(agent_id, found[0]) if e.type != _BASE_RECORD]

        return self._cached(key, tag, load) if tag else load()

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        self._check_open()
        if (limit is not None and limit <= 0) or (to_seq is not None and to_seq <= after_seq):
            return []
        tagged = await self._run(self._commits_tagged, agent_id)
        wanted: list[tuple[int, str]] = []
        for i, (first, tag) in enumerate(tagged):
            nxt = tagged[i + 1][0] if i + 1 < len(tagged) else None
            if nxt is not None and nxt - 1 <= after_seq:
                continue  # entirely at or before after_seq
            if to_seq is not None and first > to_seq:
                break
            wanted.append((first, tag))
        # a commit ends where the next one begins (a prune copies the part of the commit
        # spanning its base into a commit of its own before it hides the older one)
        ends = {first: nxt - 1 for (first, _), (nxt, _) in itertools.pairwise(tagged)}
        out: list[RawEvent] = []
        for start in range(0, len(wanted), self._wave):  # commits fetched in parallel
            chunk = wanted[start : start + self._wave]
            bodies = await asyncio.gather(
                *(self._run(self._commit_events, agent_id, first, tag) for first, tag in chunk)
            )
            for (first, _), events in zip(chunk, bodies, strict=True):
                end = ends.get(first)
                self._check_spans(agent_id, first, end, events)
                for e in events:
                    if e.seq <= after_seq or (to_seq is not None and e.seq > to_seq):
                        continue
                    if end is not None and e.seq > end:
                        break
                    out.append(e)
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    @staticmethod
    def _check_spans(
        agent_id: str, first: int, end: int | None, events: Sequence[RawEvent]
    ) -> None:
        """Refuse a commit that does not begin at its name or (not the newest) does not
        reach the next one: a commit object deleted by someone else (a lifecycle rule,
        another tool) leaves a gap that read as a shorter stream, events skipped."""
        if events and events[0].seq != first:
            raise IntegrityError(agent_id, first, "S3 commit object holds other seqs")
        reached = events[-1].seq if events else first - 1
        if end is not None and reached < end:
            raise IntegrityError(
                agent_id,
                reached + 1,
                f"events {reached + 1}..{end} are missing: their S3 commit object was "
                "deleted by something other than this store",
            )

    def _seq_at_sync(self, agent_id: str, timestamp: float) -> int:
        tagged = self._commits_tagged(agent_id)
        end: int | None = None
        for first, tag in reversed(tagged):
            events = self._commit_events(agent_id, first, tag)
            best = [
                e.seq for e in events if e.timestamp <= timestamp and (end is None or e.seq <= end)
            ]
            end = first - 1
            if best:
                return max(best)
        return 0

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        return await self._run(self._seq_at_sync, agent_id, timestamp)

    def _latest_sync(self, agent_id: str, at_or_below: int | None) -> RawSnapshot | None:
        root = self._agent_root(agent_id) + "s/"
        snaps = sorted((int(k[len(root) :]), tag) for k, tag in self._list_tagged(root))
        # below the base there is no state to go back to (a snapshot there is left by an
        # interrupted prune); the newest snapshot is never below it
        base = self._base_sync(agent_id) if at_or_below is not None else 0
        for seq, tag in reversed(snaps):
            if at_or_below is not None and seq > at_or_below:
                continue
            if seq < base:
                break
            key = root + self._seq_name(seq)
            found = self._cached(key, tag, lambda key=key: self._get(key))  # type: ignore[misc]
            if found is None:
                continue
            blob = found[0]
            return unpack_snapshot(seq, blob)
        return self._base_in_commit(agent_id, at_or_below)

    def _base_in_commit(self, agent_id: str, at_or_below: int | None) -> RawSnapshot | None:
        """The base snapshot a stream made by :meth:`append_from_base` holds in its first
        commit (its own object is written after the commit: a kill may come between)."""
        commits = self._commits(agent_id)
        if (
            not commits
            or commits[0] == 1
            or (at_or_below is not None and at_or_below < commits[0] - 1)
        ):
            return None
        found = self._get(self._agent_root(agent_id) + "e/" + self._seq_name(commits[0]))
        records = _decode_events(agent_id, found[0]) if found is not None else []
        if not records or records[0].type != _BASE_RECORD:
            return None
        e = records[0]
        return RawSnapshot(e.seq, e.timestamp, e.payload, e.checksum)

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        return await self._run(self._latest_sync, agent_id, at_or_below)

    def _agent_ids(self, after: str | None, limit: int) -> list[str]:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._root,
            "Delimiter": "/",
            "MaxKeys": max(1, min(limit, 1000)),
        }
        if after is not None:
            # '~' sorts after every hex digit and '/': skips all keys of ``after``
            kwargs["StartAfter"] = self._root + after.encode().hex() + "/~"
        ids: list[str] = []
        while len(ids) < limit:
            page = self._s3.list_objects_v2(**kwargs)
            for common in page.get("CommonPrefixes", ()):
                agent = _agent_of(common["Prefix"][len(self._root) : -1])
                if agent is not None:  # (None: another store's, nested in ours)
                    ids.append(agent)
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)
        return ids[:limit]

    def _info_sync(self, agent_id: str) -> AgentInfo | None:
        _, meta = self._tip(agent_id)
        if meta is None:
            return None
        return AgentInfo(
            agent_id, int(meta["last"]), float(meta["created"]), float(meta["updated"])
        )

    def _tips_listed(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[str, str | None]], bool]:
        """Up to ``limit`` agents after ``after``, each with the key of its newest live
        commit (None: it has none), read from ONE listing of their objects
        (ListObjectsV2 pages of 1,000 keys; an agent's keys are contiguous, its ``e/``
        ones first) instead of a listing per agent; and whether the listing ended."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root}
        if after is not None:
            kwargs["StartAfter"] = self._root + after.encode().hex() + "/~"
        out: list[tuple[str, str | None]] = []
        current: str | None = None
        tagged: list[tuple[str, str]] = []

        def close(hexid: str) -> None:
            agent = _agent_of(hexid)
            if agent is None:  # another store's objects, its prefix nested in ours
                return
            root = self._root + hexid + "/e/"
            commits = _layout_of(root, tagged).commits
            tip = root + self._seq_name(commits[-1][0]) if commits else None
            out.append((agent, tip))

        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                hexid, _, rest = obj["Key"][len(self._root) :].partition("/")
                if hexid != current:
                    if current is not None:
                        close(current)
                        if len(out) >= limit:
                            return out, False
                    current, tagged = hexid, []
                if rest.startswith("e/"):
                    tag = f"{obj.get('ETag', '')}@{obj.get('LastModified', '')}"
                    tagged.append((obj["Key"], tag))
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)
        if current is not None:
            close(current)
        return out, True

    def _info_at(self, agent_id: str, tip: str) -> AgentInfo | None:
        """The agent's info from the metadata of its newest commit ``tip`` (one HEAD;
        the agent read again when that commit went meanwhile)."""
        meta = self._head_meta(tip)
        if meta is None:
            return self._info_sync(agent_id)
        return AgentInfo(
            agent_id, int(meta["last"]), float(meta["created"]), float(meta["updated"])
        )

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One listing of the agents' objects (not one per agent), then one HEAD of each
        agent's newest commit (its head and times are in its metadata), concurrently."""
        out: list[AgentInfo] = []
        cursor = after
        while len(out) < limit:
            want = limit - len(out)
            tips, ended = await self._run(self._tips_listed, cursor, want)
            infos = await asyncio.gather(
                *(self._run(self._info_at, a, tip) for a, tip in tips if tip is not None)
            )
            out.extend(info for info in infos if info is not None)
            if ended or not tips:
                break
            cursor = tips[-1][0]
        return out

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


def upload_new(client: Any, fileobj: Any, bucket: str, key: str, *, replace: bool) -> bool:
    """Upload ``fileobj`` to ``bucket``/``key`` with ``client`` (from :func:`object_client`),
    in parts when large. Unless ``replace``, the write itself is conditional
    (``IfNoneMatch='*'`` on the ``PutObject`` or ``CompleteMultipartUpload`` that makes the
    object appear): False, nothing written, when ``key`` exists already — also when it
    appeared after any look the caller took first. Other errors are botocore's."""
    from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]

    token = _token()
    if not replace:  # s3transfer takes no IfNoneMatch in ExtraArgs: added to its calls

        def only_new(params: dict[str, Any], **_: Any) -> None:
            params["IfNoneMatch"] = "*"

        for operation in ("PutObject", "CompleteMultipartUpload"):
            client.meta.events.register(f"before-parameter-build.s3.{operation}", only_new)
    try:  # the classic transfer manager: the CRT one builds its requests without those events
        client.upload_fileobj(
            fileobj,
            bucket,
            key,
            # the upload's token: a retry whose first try's reply was lost finds it
            ExtraArgs={"Metadata": {_WRITE: token}},
            Config=TransferConfig(preferred_transfer_client="classic"),
        )
    except ClientError as exc:  # a failed multipart upload is aborted by s3transfer
        if not replace and _code(exc) in _CONDITION_FAILED:
            try:
                found = client.head_object(Bucket=bucket, Key=key).get("Metadata", {})
            except ClientError:
                return False
            return bool(found.get(_WRITE) == token)
        raise
    return True


def object_client(endpoint_url: str | None = None, region_name: str | None = None) -> Any:
    """A plain boto3 S3 client (for tools that store whole objects, such as backups),
    built here so that only the S3 engine imports the driver."""
    try:
        return boto3.client("s3", endpoint_url=endpoint_url, region_name=region_name)
    except (BotoCoreError, ValueError) as exc:  # ("Invalid endpoint: <the URL>")
        said = scrub(str(exc), endpoint_url) if endpoint_url else str(exc)
        raise ConfigurationError(f"cannot build an S3 client: {said}") from None
