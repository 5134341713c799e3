"""What the S3 backend (:mod:`statekeeper.backends.s3`) reads of a rewrite's claim.

A rewrite claims a stream with an empty commit at ``head + 1`` that copies the newest
commit's metadata when it is made (head, head tag, key). Two things here:

* :func:`tip_under_claim`: readers take the head tag from the commit under the claim,
  not from the claim's copy. A rewrite writes the newest commit (its records and new
  head tag, one object) last; one that died after that write and before deleting its
  claim left the claim's copy of the old head tag in front of the new records until
  the claim went (a take-over, or an append past ``rewrite_claim_timeout``): a keyed
  store's load and verify raised ``IntegrityError``. The rewrite also names its claim
  (:data:`WRITTEN_BY`) on that commit: a claim over it is a finished rewrite's, which
  an append deletes at once instead of conflicting until the claim is old (a rekey
  run again finds nothing left to do: it takes no claim over, which would delete it).
* :class:`TakenBy`: the claims that took over one of this backend's rewrites. Any
  rewrite takes over a claim it finds (a claim cannot tell a running rewrite from a
  dead process's, and a rekey run again must finish a killed one); but a rewrite that
  was itself taken over has seen its taker alive, and taking the taker's claim back
  in turn knocks the taker out: two rewrites retried by their callers (the store's
  rekey and migrate retry on ``ConflictError``) knocked each other out for as long as
  each retried before the other finished — for ever on a stream whose rewrite takes
  longer than a retry. A rewrite of this backend respects such a claim as an append
  does (``ConflictError`` until it is gone, finished or older than the bound).
* :func:`copies_after_newest`: the newest commit is not always a rewrite's last write —
  a prune that copied an older commit (the part above its new base) after the rewrite
  listed the commits has the rewrite rewrite that copy too. Was: after the newest
  commit, where an append (or another rewrite) meeting the claim, now finished-looking,
  deleted it: the rewrite raised ConflictError having written the rest, the copy kept
  the old record. Now such copies are rewritten before the newest commit as well, and
  a rewrite whose finished claim went after it leaves the copies made since to their
  prune (which makes its copy again from the rewritten commit).
* :func:`conflict`: a write meeting a rewrite's claim is told so
  (:class:`~statekeeper.errors.StreamClaimed`: the claim's age and the bound), not that
  the head record was rewritten (expected and stored heads are equal under a claim).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

from ...errors import ConflictError, StreamClaimed
from ...records import RawEvent, RewriteRequest

#: how many claims that took over one of ours a backend remembers (oldest forgotten)
_REMEMBERED = 1024
#: the S3 backend's metadata names: an object's write token, a rewrite's claim mark
_TOKEN, _REWRITING = "w", "rw"

#: the metadata a rewrite sets on each commit it writes: its claim's token. The newest
#: commit is its last write: a claim bearing the token the commit under it names lies
#: over a finished rewrite, only its deletion left (its process died, or is about to)
WRITTEN_BY = "rwby"
#: set (by the reader, never stored) on the metadata of a rewrite's claim whose rewrite
#: wrote its newest commit: the claim's token (an append deletes such a claim at once)
FINISHED = "rwdone"


def tip_under_claim(claim: dict[str, str], under: dict[str, str] | None) -> dict[str, str]:
    """The metadata a reader takes for the newest commit when it is a rewrite's
    ``claim``: the claim's, with the head tag of ``under`` (the commit holding the
    head, read after the claim), which the rewrite writes last, and :data:`FINISHED`
    when ``under`` was written by that claim's rewrite. ``under`` gone or not ending at
    the claim's head (a prune racing the read): the claim's own."""
    if under is None or under.get("last") != claim.get("last"):
        return claim
    out = {k: v for k, v in claim.items() if k != "headtag"}
    if "headtag" in under:
        out["headtag"] = under["headtag"]
    token = claim.get(_TOKEN)
    if token and under.get(WRITTEN_BY) == token:
        out[FINISHED] = token
    return out


class TakenBy:
    """The claims (object key, write token) that took over a rewrite of this backend."""

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, key: str, found: dict[str, str] | None) -> None:
        """The object at ``key`` (our rewrite's claim) is now ``found``: when it is
        another rewrite's claim, that one took ours."""
        token = found.get(_TOKEN) if found is not None and found.get(_REWRITING) else None
        if not token:
            return
        with self._lock:
            self._seen[(key, token)] = None
            while len(self._seen) > _REMEMBERED:
                self._seen.popitem(last=False)

    def respected(self, key: str, claim: dict[str, str], now: float, bound: float) -> bool:
        """Whether the rewrite's ``claim`` at ``key`` is one that took over a rewrite of
        ours and is not older than ``bound`` at ``now``: not to be taken over. A
        :data:`FINISHED` one is not (only its deletion is left, which an append does at
        once: respected, it held this backend's rewrites off until the bound)."""
        token = claim.get(_TOKEN)
        if not token or claim.get(FINISHED) or claim_age(claim, now) > bound:
            return False
        with self._lock:
            return (key, token) in self._seen


def claim_age(claim: dict[str, str], now: float) -> float:
    """How old ``claim`` is at ``now`` by the date its maker wrote in it (``at``); an
    undated or unreadable one is as old as can be."""
    try:
        return now - float(claim.get("at", "0"))
    except ValueError:
        return float("inf")


def conflict(
    agent_id: str,
    expected: int,
    current: int,
    found: dict[str, str] | None,
    now: float,
    bound: float,
) -> ConflictError:
    """The conflict of a write at ``expected`` (the stored head ``current``) that found
    ``found`` (an object's metadata, None: gone) in its way: :class:`StreamClaimed` when
    it is a rewrite's claim over that head (its age at ``now``, ``bound`` the claim
    timeout); over another head, the caller's head is out of date whatever holds it."""
    if found is None or not found.get(_REWRITING) or found.get("last") != str(expected):
        return ConflictError(agent_id, expected, current)
    return StreamClaimed(agent_id, expected, current, claim_age(found, now), bound)


class _Engine(Protocol):  # (the S3 backend's parts used by copies_after_newest)
    def _rewrite_copies(
        self,
        request: RewriteRequest,
        listed: list[int],
        changes: dict[int, RawEvent],
        head: int,
        held: tuple[str, str],
    ) -> None: ...

    def _commits(self, agent_id: str) -> list[int]: ...

    def _head_meta(self, key: str) -> dict[str, str] | None: ...

    def _agent_root(self, agent_id: str) -> str: ...

    def _seq_name(self, seq: int) -> str: ...


def copies_after_newest(
    engine: _Engine,
    request: RewriteRequest,
    listed: list[int],
    changes: dict[int, RawEvent],
    head: int,
    held: tuple[str, str],
) -> None:
    """After a rewrite's writes of the commits it ``listed`` (up to ``head``, its claim
    ``held``: key, token): the copies a prune made of them meanwhile rewritten
    (``_rewrite_copies``). Its ConflictError is the rewrite's unless the claim is gone
    (or another's) while the newest commit listed — still the one holding ``head``, no
    copy of it since — names that claim (:data:`WRITTEN_BY`): a finished-looking claim
    an append or a rewrite may delete at once. Then the rewrite is done: the copies made
    before the newest commit's write were rewritten before it (the caller), and one made
    since comes from a commit already rewritten, or its prune's check finds that
    commit changed and copies it again."""
    try:
        engine._rewrite_copies(request, listed, changes, head, held)
    except ConflictError:
        claim = engine._head_meta(held[0])
        if claim is not None and claim.get(_TOKEN) == held[1]:
            raise  # (still its claim: a conflict of its own)
        agent_id = request.agent_id
        root = engine._agent_root(agent_id) + "e/"
        newest = engine._head_meta(root + engine._seq_name(listed[-1]))
        if newest is None or newest.get(WRITTEN_BY) != held[1] or newest.get("last") != str(head):
            raise
        if any(listed[-1] < first <= head for first in engine._commits(agent_id)):
            raise  # (a copy of the newest commit: its records are this rewrite's to write)
        return
