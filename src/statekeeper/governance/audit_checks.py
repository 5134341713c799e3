"""What ``audit verify`` checks of the log against the store, beyond the log itself.

The log proves it is whole (keyed chain, authenticated head, witness). Whether each
change it records is really in the store is a second question, answered here per kind
of entry, from the entries of each agent in log order:

* **appends** written ahead of their write (Redis Cluster, S3, tiered) of an agent
  deleted afterwards: the delete's entry names the head it erased (seq and checksum), so an
  append at that seq is applied iff its checksum is the erased one, one past it was
  never written, one below it was written iff it is the only entry claiming that seq.
* **deletes** committed with their entry name the head they erased: every seq up to
  it must be claimed by an entry of the agent since its previous delete (events no
  entry records are a problem: written without the audit log), and an agent deleted
  and not written again since must not be in the store.
* **snapshots** name the record they stored (seq and checksum): it must be in the
  store, unless a later entry removed it (a delete, a purge, a compaction at or past
  it) or replaced it (a snapshot at the same seq, a rekey or migration rewriting it).
* **compactions** (retention ``compact``): no event at or below the new base is left;
  **thinnings** and compactions name the snapshots they drop (``detail.dropped``):
  none is still stored unless a later entry stored it again; **purges**: followed by
  their delete, or the agent is gone.
* **leases**: the lease table keeps an agent's newest fencing token and whether that
  lease was released, so the newest ``lease`` entry of an agent (which names the token,
  ``detail.token``) must hold the table's token (a bigger one in the table: a lease
  granted without the log; a smaller one: announced, never granted), and a
  ``lease-release`` of that token recorded after it must have left no holder; on an
  engine that lists its lease table (``Capability.LEASE_LIST``) a running lease of an
  agent no lease entry names is a lease granted without the log.

The other direction (events in the store no entry claims) is
:mod:`.audit_claims`. What cannot be checked is counted per operation in
``AuditReport.unchecked`` (and shown by ``statekeeper audit verify``) rather than
passed in silence: the older leases of an agent and their releases (the table keeps
only the newest token), leases recorded lost (observed, not made), lease entries
without a token and thinnings that do not name what they drop (written before they
did), ``forget`` when the log's keyring has no key vault (with one, the agent must
have a tombstone there), ``restore`` (one entry for a whole backup), deletes recorded
before deletes named their head or with no append entry since the agent's last delete
or restore, and appends whose agent was rewritten (rekey, migrate) or erased without a
named head before their write could be told. Entries committed with their change
(appends, deletes, snapshots, retention, leases, rekey and migrate rewrites on memory,
SQLite, PostgreSQL) need no check of having been applied: one commit holds both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..arguments import RUN_LOCKS
from ..backends.base import Capability
from .audit_holds import HoldChecks

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .audit import AuditEntry

__all__ = ["StoreChecks"]

_APPENDS = frozenset({"create", "save", "append", "transition"})
_REWRITES = frozenset({"rekey", "migrate"})
#: entries that store a snapshot record and name it: an explicit snapshot, a repair's
_SNAPSHOTS = frozenset({"snapshot", "repair"})
#: operations recorded as changes with nothing in the store to compare them with
_LEASES = frozenset({"lease", "lease-release", "lease-lost"})
_UNCHECKABLE = frozenset({"forget", "restore"})
_LEASE_PAGE = 1000


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the checks keep of one entry of an agent."""

    seq: int
    op: str
    outcome: str
    first: int | None
    last: int | None
    ahead: str | None  # the checksum an append written ahead announces
    head: tuple[int, str] | None  # the head a delete erased
    together: bool  # a delete committed with its entry
    snapshot: tuple[int, str] | None  # the snapshot record an entry stored
    snapshot_ahead: bool
    dropped: tuple[int, ...] | None = None  # the snapshots a retention run removed
    ahead_mark: bool = False  # written ahead of its change (else: in its commit)
    token: int | None = None  # the fencing token a lease entry names
    #: the key families whose key of the agent a forget's entry says it destroys
    scopes: tuple[str, ...] = ()


def _scopes(value: Any) -> tuple[str, ...]:
    """The key families a forget's entry names (``key_scopes``), its legacy key left
    out: a store without a family may give the id a legacy key again."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v and v != "legacy")


def _pair(value: Any) -> tuple[int, str] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and type(value[0]) is int
        and isinstance(value[1], str)
    ):
        return value[0], value[1]
    return None


class StoreChecks:
    """Gathers the entries (:meth:`see`, in log order), then checks them against the
    store (:meth:`check`)."""

    __slots__ = (
        "agents",
        "holds",
        "restore_times",
        "restores",
        "started",
        "unchecked",
        "vault",
        "voided",
    )

    def __init__(self, vault: Any = None) -> None:
        # the key vault of the log's keyring (per-agent data keys), where a forget's
        # tombstone is: None when the log is sealed with a keyring without one
        self.vault = vault
        self.agents: dict[str, list[_Seen]] = {}
        self.voided: set[int] = set()
        self.restores: list[int] = []
        self.restore_times: dict[int, float] = {}  # restore entry seq -> its time
        self.started: float | None = None  # the time of the log's first entry
        self.unchecked: Counter[str] = Counter()
        self.holds = HoldChecks()  # no purge of an agent a hold in force covers

    def see(self, entry: AuditEntry) -> None:
        detail = entry.detail
        if self.started is None:
            self.started = entry.time
        voided = detail.get("voids")
        if type(voided) is int:
            self.voided.add(voided)
            return
        self.holds.see(entry)
        # (a restore's entry written ahead, "started", holds to its time what it wrote
        # even when it was stopped before its "ok" entry)
        if entry.operation == "restore" and entry.outcome in ("ok", "started"):
            self.restores.append(entry.seq)
            self.restore_times[entry.seq] = entry.time
        agent = entry.agent_id
        if agent is None or not entry.outcome.startswith(("ok", "done")):
            return
        mark = detail.get("ahead")
        snapshot = _pair(detail.get("snapshot"))
        snapshot_ahead = False
        if isinstance(mark, dict) and _pair(mark.get("snapshot")) is not None:
            snapshot, snapshot_ahead = _pair(mark.get("snapshot")), True
        head = _pair(detail.get("erased"))
        together = head is not None
        if head is None and isinstance(mark, dict):
            head = _pair(mark.get("gone"))
        named = detail.get("dropped")
        dropped = None
        if isinstance(named, list) and all(type(seq) is int for seq in named):
            dropped = tuple(named)
        self.agents.setdefault(agent, []).append(
            _Seen(
                entry.seq,
                entry.operation,
                entry.outcome,
                entry.first_seq,
                entry.last_seq,
                mark if isinstance(mark, str) else None,
                head,
                together,
                snapshot,
                snapshot_ahead,
                dropped,
                "ahead" in detail,
                detail["token"] if type(detail.get("token")) is int else None,
                _scopes(detail.get("key_scopes")),
            )
        )

    async def check(
        self, backend: Backend, skipped: list[tuple[int, str]]
    ) -> tuple[list[str], list[str]]:
        """``(unapplied, problems)`` found against ``backend``; ``skipped``: the appends
        written ahead (entry seq, agent) the reconciliation of live streams could not
        tell, because the agent was erased or rewritten after them."""
        unapplied: list[str] = []
        problems: list[str] = []
        skip = {seq for seq, _ in skipped}
        for agent, seen in sorted(self.agents.items()):
            seen = [s for s in seen if s.seq not in self.voided]
            leases = [s for s in seen if s.op in _LEASES]
            if leases:
                await self._leases(backend, agent, leases, unapplied, problems)
            for i, s in enumerate(seen):
                later = seen[i + 1 :]
                if s.op == "forget" and self.vault is not None:
                    self._forget(agent, s, unapplied)
                elif s.op in _UNCHECKABLE:
                    self.unchecked[s.op] += 1
                elif s.op in _APPENDS and s.seq in skip:
                    self._erased_append(agent, s, seen, later, unapplied)
                elif s.op == "delete" and s.outcome == "ok":
                    await self._delete(backend, agent, s, seen[:i], later, problems)
                elif s.op == "compact":
                    await self._compact(backend, agent, s, later, unapplied)
                    await self._dropped(backend, agent, s, later, unapplied, problems)
                elif s.op == "thin":
                    await self._dropped(backend, agent, s, later, unapplied, problems)
                elif s.op == "purge":
                    await self._purge(backend, agent, s, later, unapplied)
                if s.op in _SNAPSHOTS:
                    await self._snapshot(backend, agent, s, later, unapplied, problems)
        await self._unlogged_leases(backend, problems)
        problems.extend(self.holds.problems(self.voided))
        return unapplied, problems

    def _forget(self, agent: str, s: _Seen, unapplied: list[str]) -> None:
        """A ``forget`` (entry first: the data key is in the key vault, not the store)
        left a tombstone in the vault; a key still there is a forget a crash stopped
        between its entry and the key's destruction."""
        entries = getattr(self.vault, "entries", None)  # (a vault with key families)
        found = entries(agent) if entries is not None else [self.vault.load(agent)]
        if s.scopes and entries is not None:
            # each family the entry names must hold a tombstone now (a tombstone of the
            # id elsewhere, another store's forget, says nothing of this one) — of the
            # agent or a stream it continues (its lineage: the forget destroyed their
            # keys too, a family only its predecessor had a key in is named)
            lineage = getattr(self.vault, "lineage", None)
            linked = lineage(agent) if lineage is not None else set()
            for one in sorted(linked):
                if one[:1] != "\x01":
                    found = [*found, *entries(one)]
            dead = {e.family for e in found if e.wrapped is None and e.family is not None}
            applied = set(s.scopes) <= dead
        else:
            applied = any(e is not None and e.forgotten_at is not None for e in found)
        if not applied:
            unapplied.append(
                f"entry {s.seq}: the forget of {agent!r} it records was not applied (its "
                "data key is still in the key vault: the process stopped between the entry "
                "and the key's destruction; run `statekeeper forget` on it again)"
            )

    async def _unlogged_leases(self, backend: Backend, problems: list[str]) -> None:
        """Leases of agents the log has no lease entry of (an engine that can list its
        lease table, ``Capability.LEASE_LIST``): one still running, or one that
        expires after the log's first entry, was granted while the log was kept, so
        without it (a problem); a released one, or one that expired before the log
        began, cannot be told from a lease older than the log (counted)."""
        if self.started is None or not backend.supports(Capability.LEASE_LIST):
            return
        logged = {
            agent
            for agent, seen in self.agents.items()
            if any(s.op in _LEASES and s.seq not in self.voided for s in seen)
        }
        after = ""
        while True:
            page = await backend.list_leases(after, _LEASE_PAGE)
            for info in page:
                if info.agent_id in logged or info.agent_id.startswith(RUN_LOCKS):
                    continue  # (a run lock: the store's own, not an agent's lease)
                if info.holder is not None and info.expires_at >= self.started:
                    problems.append(
                        f"{info.agent_id!r}: the lease table holds a lease (fencing token "
                        f"{info.token}, holder {info.holder!r}) no lease entry records: "
                        "granted without the audit log"
                    )
                else:
                    self.unchecked["lease"] += 1
            if len(page) < _LEASE_PAGE:
                return
            after = page[-1].agent_id

    # -- each kind ------------------------------------------------------------------------

    async def _leases(
        self,
        backend: Backend,
        agent: str,
        leases: list[_Seen],
        unapplied: list[str],
        problems: list[str],
    ) -> None:
        """The lease table keeps an agent's newest fencing token (and whether that lease
        was released), not their history: the newest lease taken is checked against
        it (the token), and a release recorded after it (the holder gone); the older
        entries, and leases recorded lost (observed, not made), are counted."""
        taken = [s for s in leases if s.op == "lease" and s.token is not None]
        newest = taken[-1] if taken else None
        last = leases[-1]
        for s in leases:
            # the others: one committed with its grant or release needs no check (one
            # commit holds both); one written ahead cannot be checked, nor a loss
            # (observed, not made): counted
            older = s is not newest and not (s is last and s.op == "lease-release")
            if older and (s.ahead_mark or s.op == "lease-lost"):
                self.unchecked[s.op] += 1
        if newest is None:
            if last.op == "lease-release":
                self.unchecked[last.op] += 1
            return
        info = await backend.get_lease(agent)  # (rows are never removed: tokens only grow)
        stored, holder = (info.token, info.holder) if info is not None else (0, None)
        token = newest.token
        assert token is not None
        if stored > token:
            problems.append(
                f"{agent!r}: the lease table holds fencing token {stored}, the newest "
                f"lease entry (entry {newest.seq}) records {token}: a lease was granted "
                "without the audit log"
            )
        elif stored < token:
            unapplied.append(
                f"entry {newest.seq}: the lease of {agent!r} with fencing token {token} it "
                f"records was not granted (the table holds {stored or 'none'}; the process "
                "stopped between the entry and the grant)"
            )
        if last.op != "lease-release":
            return
        if last.token != stored:
            if last.ahead_mark:
                self.unchecked["lease-release"] += 1  # a release of an older lease
        elif holder is not None:
            unapplied.append(
                f"entry {last.seq}: the release of the lease of {agent!r} (token "
                f"{stored}) it records was not applied (the lease is still held)"
            )

    def _erased_append(
        self,
        agent: str,
        s: _Seen,
        seen: list[_Seen],
        later: list[_Seen],
        unapplied: list[str],
    ) -> None:
        k = s.last
        erase = None
        for t in later:
            if t.op in _REWRITES:
                break  # rewritten before any named head: its checksum is gone
            if t.op == "delete" and t.head is not None:
                erase = t
                break
        if erase is None or erase.head is None or k is None or s.ahead is None:
            self.unchecked[s.op] += 1
            return
        n, checksum = erase.head
        if k == n:
            written = s.ahead == checksum
        elif k > n:
            written = False  # the stream never reached it before it was erased
        else:
            start = _epoch_start(seen, s)
            claims = [
                t
                for t in seen
                if start < t.seq < erase.seq
                and t.op in _APPENDS
                and t.first is not None
                and t.last is not None
                and t.first <= k <= t.last
            ]
            if len(claims) != 1:
                self.unchecked[s.op] += 1  # several entries claim that seq: which one wrote it?
                return
            written = True
        if not written:
            unapplied.append(
                f"entry {s.seq}: the {s.op} of {agent!r} at seq {k} it records was not "
                f"written (the delete of entry {erase.seq} erased the stream at seq {n}; "
                "the writer stopped between the entry and the write)"
            )

    async def _delete(
        self,
        backend: Backend,
        agent: str,
        s: _Seen,
        before: list[_Seen],
        later: list[_Seen],
        problems: list[str],
    ) -> None:
        if s.head is None:
            self.unchecked["delete"] += 1  # recorded without the head it erased
            return
        n, checksum = s.head
        start = _epoch_start([*before, s], s)
        restored = [r for r in self.restores if start < r < s.seq]
        if restored:
            # restored since (a restore records no appends, and needs the agent absent):
            # what the restore wrote is the stream below the first seq an append entry
            # after it claims; from there on every seq must be claimed as usual
            start = restored[-1]
        ranges = sorted(
            (t.first, t.last)
            for t in before
            if t.seq > start and t.op in _APPENDS and t.first is not None and t.last is not None
        )
        missing = _gaps(ranges, n)
        if ranges and missing:
            spans = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in missing)
            problems.append(
                f"entry {s.seq}: the delete of {agent!r} erased events ({spans}) that no "
                "entry records (written without the audit log)"
            )
        elif not ranges:
            # written before the log (or without it), or all of it by a restore
            self.unchecked["delete"] += 1
        if any(t.op in _APPENDS for t in later) or any(r > s.seq for r in self.restores):
            return  # written again (or restored) since: the store's stream is a later one
        if await backend.head(agent) == 0:
            return
        if not s.together:  # written ahead: still the erased stream is "not applied"
            raws = await backend.read(agent, n - 1, n)
            if raws and raws[-1].seq == n and raws[-1].checksum.hex() == checksum:
                return  # (reported as not applied by the reconciliation of deletes)
        problems.append(
            f"entry {s.seq}: {agent!r} was deleted, and the store holds it again "
            "with no entry writing it (restored or written without the audit log)"
        )

    async def _snapshot(
        self,
        backend: Backend,
        agent: str,
        s: _Seen,
        later: list[_Seen],
        unapplied: list[str],
        problems: list[str],
    ) -> None:
        if s.snapshot is None:
            self.unchecked["snapshot"] += 1  # recorded before entries named the record
            return
        seq, checksum = s.snapshot
        rewritten = False
        for t in later:
            if t.op in ("delete", "purge") or (t.op == "compact" and (t.last or 0) >= seq):
                return  # removed by a later change that has its own entry
            if t.op in _SNAPSHOTS and t.snapshot is not None and t.snapshot[0] == seq:
                return  # replaced (a repair's rebuilt one too): the later entry is checked
            if t.op in ("thin", "compact") and t.dropped is not None and seq in t.dropped:
                return  # removed by a retention run that names it
            if t.op == "thin" and t.dropped is None:
                self.unchecked["snapshot"] += 1  # maybe thinned: the run does not name it
                return
            rewritten = rewritten or t.op in _REWRITES
        raw = await backend.latest_snapshot(agent, at_or_below=seq)
        if raw is not None and raw.seq == seq and (rewritten or raw.checksum.hex() == checksum):
            return
        if s.snapshot_ahead:
            unapplied.append(
                f"entry {s.seq}: the snapshot of {agent!r} at seq {seq} it records was not "
                "stored (the writer stopped between the entry and the write)"
            )
        else:
            problems.append(
                f"entry {s.seq}: the snapshot of {agent!r} at seq {seq} it records is not "
                "in the store, and no entry removed it"
            )

    async def _dropped(
        self,
        backend: Backend,
        agent: str,
        s: _Seen,
        later: list[_Seen],
        unapplied: list[str],
        problems: list[str],
    ) -> None:
        """A retention run's snapshots removed (``detail.dropped``): none still stored,
        unless a later entry stored one at that seq again or removed the agent."""
        if s.dropped is None:
            self.unchecked[s.op] += 1  # recorded before runs named what they drop
            return
        if any(t.op in ("delete", "purge") for t in later):
            return
        again = {t.snapshot[0] for t in later if t.op in _SNAPSHOTS and t.snapshot is not None}
        left = []
        for seq in s.dropped:
            if seq in again:
                continue
            raw = await backend.latest_snapshot(agent, at_or_below=seq)
            if raw is not None and raw.seq == seq:
                left.append(seq)
        if not left:
            return
        what = (
            f"entry {s.seq}: the {s.op} of {agent!r} removed the snapshots at seqs "
            f"{', '.join(map(str, left))}, and they are still stored"
        )
        if s.ahead_mark:
            unapplied.append(f"{what} (the run stopped between the entry and the change; "
                             "run retention again)")  # fmt: skip
        else:
            problems.append(f"{what} (stored again without the audit log)")

    async def _compact(
        self, backend: Backend, agent: str, s: _Seen, later: list[_Seen], unapplied: list[str]
    ) -> None:
        base = s.last
        if base is None or any(t.op in ("delete", "purge") for t in later):
            return
        first = await backend.read(agent, 0, base, limit=1)
        if first:
            unapplied.append(
                f"entry {s.seq}: the compaction of {agent!r} to seq {base} it records was "
                "not applied (events at or below it are still stored; run retention again)"
            )

    async def _purge(
        self, backend: Backend, agent: str, s: _Seen, later: list[_Seen], unapplied: list[str]
    ) -> None:
        if any(t.op == "delete" for t in later):
            return
        if any(t.op in _APPENDS for t in later):
            self.unchecked["purge"] += 1  # written again since, with no delete between
            return
        if await backend.head(agent) != 0:
            unapplied.append(
                f"entry {s.seq}: the purge of {agent!r} it records was not applied (the "
                "agent is still stored; run retention again)"
            )


def _epoch_start(seen: list[_Seen], s: _Seen) -> int:
    """The entry seq of the last delete of the agent before ``s`` (0: none)."""
    start = 0
    for t in seen:
        if t.seq >= s.seq:
            break
        if t.op == "delete":
            start = t.seq
    return start


def _gaps(ranges: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The seqs of ``1..n`` after the first range's start that no range covers (the
    seqs before the first entry are not counted: written before the log)."""
    if not ranges:
        return []
    out = []
    covered = ranges[0][0] - 1
    for first, last in ranges:
        if first > covered + 1:
            out.append((covered + 1, first - 1))
        covered = max(covered, last)
    if covered < n:
        out.append((covered + 1, n))
    return out
