"""Bulk migrations: bring every stored state of a model to a schema version.

Loading already upcasts old states on the fly; a migration writes the upcast state
back so that old versions (and their upcasters) can be retired. For each agent whose
stored document names the model and whose schema version is not the target:

1. the latest state is read (a page of 1,000 agents at a time, with
   :meth:`StateStore.get_many`: one consistent read on SQLite), cast to the target
   (upcasters or downcasters) and validated against the model — an agent that fails
   is reported, never written;
2. the difference is appended as one ``schema.migrate`` event stamped with the target
   version, under the compare-and-set head every write uses (expected seq and head
   tag; the page's appends in flight together share commits through the store's
   group commit): a live writer that appended meanwhile
   makes it re-read and retry, so the system keeps serving while a migration runs in
   batches;
3. nothing is rewritten in place: the pre-migration records stay in the stream, so
   :func:`rollback` can restore them (as a ``schema.rollback`` event) until
   :func:`finalize` closes the window.

Each agent's migration is one atomic append, so a run killed at any instruction
leaves every agent either migrated or not; rerunning skips the migrated ones (their
version is the target) and, with a journal file, starts after the last finished page.
:func:`migrate` with ``dry_run=True`` writes nothing and reports counts per stored
version, a sample diff per version and the agents that would fail validation.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import patch
from ..errors import (
    AgentNotFound,
    ConflictError,
    InvalidArgument,
    MigrationError,
    SchemaError,
)
from ..records import Event, Snapshot
from ..store.governed import governance_of
from .models import MODEL_KEY
from .registry import ModelSchema, SchemaRegistry, schema_of

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = [
    "MIGRATE_EVENT",
    "ROLLBACK_EVENT",
    "Journal",
    "MigrationFailure",
    "MigrationReport",
    "finalize",
    "migrate",
    "rollback",
    "verify",
]

MIGRATE_EVENT = "schema.migrate"
ROLLBACK_EVENT = "schema.rollback"
_PAGE = 1000
_RETRIES = 50


@dataclass(slots=True)
class MigrationFailure:
    """An agent a migration (or rollback) could not write, and why."""

    agent_id: str
    seq: int | None
    version: int | None
    error: str
    kind: str
    fields: list[str] = field(default_factory=list)


@dataclass(slots=True)
class MigrationReport:
    """What a run did (or, dry, would do)."""

    run_id: str
    model: str
    target: int
    action: str = "migrate"
    dry_run: bool = False
    #: agents in the store when the run started (the progress total)
    total: int = 0
    #: agents looked at by this run
    scanned: int = 0
    #: agents of this model, by stored schema version (when they were read)
    versions: dict[int, int] = field(default_factory=dict)
    #: agents written (dry run: that would be written)
    changed: int = 0
    #: agents already at the target (migrate) or not touched by the run (rollback)
    unchanged: int = 0
    #: agents of other models, or untyped
    other: int = 0
    #: agents that could not be written (validation, missing caster, rollback blocked)
    failed: list[MigrationFailure] = field(default_factory=list)
    #: compare-and-set retries caused by live writers
    retries: int = 0
    #: one example per stored version: agent, ops, document before and after
    samples: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: agents checked by the verification pass, and the problems it found
    verified: int = 0
    problems: list[MigrationFailure] = field(default_factory=list)
    resumed_after: str | None = None
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing failed and verification found no problem."""
        return not self.failed and not self.problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``statekeeper migrate --json``)."""
        out = asdict(self)
        out["ok"] = self.ok
        out["versions"] = {str(k): v for k, v in sorted(self.versions.items())}
        out["samples"] = {str(k): v for k, v in sorted(self.samples.items())}
        return out


@dataclass(slots=True)
class Journal:
    """The durable record of a migration run (a small JSON file): its id, model and
    target, the last agent of the last finished page (where a resumed run starts),
    whether it finished, was rolled back or finalized."""

    run_id: str
    model: str
    target: int
    after: str | None = None
    done: bool = False
    rolled_back: bool = False
    finalized: bool = False
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    changed: int = 0

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        """The journal at ``path`` (None when there is none); MigrationError if it is
        not a migration journal."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(text)
            if doc.get("statekeeper_migration") != 1:
                raise ValueError("not a migration journal")
            return cls(
                run_id=str(doc["run_id"]),
                model=str(doc["model"]),
                target=int(doc["target"]),
                after=doc.get("after"),
                done=bool(doc.get("done")),
                rolled_back=bool(doc.get("rolled_back")),
                finalized=bool(doc.get("finalized")),
                started_at=float(doc.get("started_at", 0.0)),
                updated_at=float(doc.get("updated_at", 0.0)),
                changed=int(doc.get("changed", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MigrationError(f"{path} is not a readable migration journal ({exc})") from None

    def save(self, path: Path) -> None:
        """Write atomically and durably (temp file, fsync, rename)."""
        self.updated_at = time.time()
        doc = {"statekeeper_migration": 1, **asdict(self)}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


Progress = Callable[[int, int], Any]


def _schema(model: Any, schemas: SchemaRegistry | None) -> ModelSchema[Any]:
    if isinstance(model, str):
        return (schemas if schemas is not None else _default()).get(model)
    return schema_of(model, schemas)


def _default() -> SchemaRegistry:
    from .registry import registry

    return registry


def _failure(
    agent_id: str, seq: int | None, version: int | None, exc: Exception
) -> MigrationFailure:
    return MigrationFailure(
        agent_id, seq, version, str(exc), type(exc).__name__, list(getattr(exc, "fields", []))
    )


async def _pages(store: StateStore, after: str | None) -> Any:
    while True:
        page = await store.list_agents(after=after, limit=_PAGE)
        if page:
            yield [info.agent_id for info in page]
        if len(page) < _PAGE:
            return
        after = page[-1].agent_id


async def _each(items: list[Any], concurrency: int, fn: Callable[[Any], Any]) -> None:
    """Run ``fn`` over ``items`` with at most ``concurrency`` at a time."""
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))


def _target_doc(
    schema: ModelSchema[Any],
    doc: dict[str, Any],
    version: int,
    target: int,
    agent_id: str,
    seq: int,
) -> dict[str, Any]:
    """``doc`` cast to ``target``, validated (and in canonical form) when ``target`` is
    the model's own version."""
    cast = schema.convert(doc, version, target, agent_id=agent_id, seq=seq)
    if target == schema.version:
        state = schema.load(cast, target, agent_id=agent_id, seq=seq)
        cast = schema.adapter.dump_validated(state)  # (validated just above)
    return {MODEL_KEY: schema.name, **cast}


async def migrate(
    store: StateStore,
    model: Any,
    *,
    to: int | None = None,
    schemas: SchemaRegistry | None = None,
    dry_run: bool = False,
    journal: str | os.PathLike[str] | None = None,
    concurrency: int = 64,
    check: bool = True,
    on_progress: Progress | None = None,
) -> MigrationReport:
    """Bring every stored state of ``model`` (a class, a :class:`ModelSchema` or a
    stored name in ``schemas``) to schema version ``to`` (default: the model's).

    ``journal``: a file recording the run, so that an interrupted run resumes after
    its last finished page (and :func:`rollback`/:func:`finalize` find the run).
    ``check``: re-read every agent of the model from storage afterwards and report any
    not at the target or not loading (:attr:`MigrationReport.problems`).
    ``on_progress(done, total)`` is called as agents are processed.
    """
    schema = _schema(model, schemas)
    target = schema.version if to is None else to
    if type(target) is not int or target < 1:
        raise InvalidArgument("to", f"to must be a schema version >= 1, not {target!r}")
    if type(concurrency) is not int or concurrency < 1:
        raise InvalidArgument("concurrency", "concurrency must be an int >= 1")
    path = Path(journal) if journal is not None else None
    run = Journal(run_id=secrets.token_hex(6), model=schema.name, target=target)
    if path is not None:
        earlier = Journal.load(path)
        if earlier is not None:
            if earlier.model != schema.name:
                raise MigrationError(
                    f"{path} is the journal of a migration of {earlier.model!r}, not "
                    f"{schema.name!r}: give another --journal"
                )
            if earlier.finalized and earlier.target == target:
                raise MigrationError(f"run {earlier.run_id} was finalized already")
            if earlier.target == target and not earlier.rolled_back and not dry_run:
                run = earlier  # resume (or re-check) the same run
                run.done = False
    governance = governance_of(store)
    if governance is not None:  # a store opened as a principal: admin of every namespace
        await governance.require(None, "admin", "migrate")
    started = time.monotonic()
    report = MigrationReport("" if dry_run else run.run_id, schema.name, target, dry_run=dry_run)
    report.total = await store.count_agents()
    report.resumed_after = run.after if not dry_run else None
    after = run.after if not dry_run else None

    async def one(agent_id: str, read: Snapshot | None) -> None:
        for _attempt in range(_RETRIES):
            # the first attempt uses the page's batched read; a retry reads again
            snap = read if _attempt == 0 else await store.get(agent_id)
            if snap is None:
                return
            doc = snap.data
            if doc.get(MODEL_KEY) not in schema.names():
                report.other += 1
                return
            version = snap.schema_version
            if _attempt == 0:
                report.versions[version] = report.versions.get(version, 0) + 1
            if version == target:
                report.unchanged += 1
                return
            try:
                new = _target_doc(schema, doc, version, target, agent_id, snap.seq)
            except SchemaError as exc:
                report.failed.append(_failure(agent_id, snap.seq, version, exc))
                return
            ops = patch.diff(doc, new)
            if version not in report.samples:
                report.samples[version] = {
                    "agent_id": agent_id,
                    "seq": snap.seq,
                    "ops": ops,
                    "before": doc,
                    "after": new,
                }
            if dry_run:
                report.changed += 1
                return
            info = {"run": run.run_id, "model": schema.name, "from": version, "to": target}
            try:
                await store.append(
                    agent_id,
                    MIGRATE_EVENT,
                    info,
                    ops=ops,
                    expected_seq=snap.seq,
                    schema_version=target,
                )
            except ConflictError:
                report.retries += 1
                continue
            except AgentNotFound:
                return
            report.changed += 1
            return
        report.failed.append(
            MigrationFailure(agent_id, None, None, "too many concurrent writes", "ConflictError")
        )

    done = 0
    async for ids in _pages(store, after):
        # the page's latest states in one read; the appends then share commits
        pairs = list(zip(ids, await store.get_many(ids), strict=True))
        await _each(pairs, concurrency, lambda pair: one(*pair))
        await store.flush()
        done += len(ids)
        report.scanned += len(ids)
        if not dry_run and path is not None:
            run.after = ids[-1]
            run.changed += 0  # counted below, once the run ends
            run.save(path)
        if on_progress is not None:
            on_progress(done, report.total)
    if not dry_run:
        run.done = True
        run.changed += report.changed
        if path is not None:
            run.after = None
            run.save(path)
        if check:
            await _verify(store, schema, target, report)
        if governance is not None:
            await governance.record(
                "migrate",
                detail={"run": run.run_id, "model": schema.name, "to": target,
                        "changed": report.changed},
            )  # fmt: skip
    report.elapsed = time.monotonic() - started
    return report


async def _verify(
    store: StateStore, schema: ModelSchema[Any], target: int, report: MigrationReport
) -> None:
    """Re-read every agent of ``schema`` from storage (not the cache): each must be at
    ``target`` and load as the model."""

    async def one(agent_id: str) -> None:
        head = await store.head(agent_id)
        if head == 0:
            return
        try:
            snap = await store.load(agent_id, at_seq=head)  # folded from storage
        except AgentNotFound:
            return
        if snap.data.get(MODEL_KEY) not in schema.names():
            return
        report.verified += 1
        if snap.schema_version != target:
            report.problems.append(
                MigrationFailure(
                    agent_id,
                    snap.seq,
                    snap.schema_version,
                    f"at schema version {snap.schema_version}, not {target}",
                    "NotMigrated",
                )
            )
            return
        if target == schema.version:
            try:
                schema.load(snap.data, target, agent_id=agent_id, seq=snap.seq)
            except SchemaError as exc:
                report.problems.append(_failure(agent_id, snap.seq, target, exc))

    async for ids in _pages(store, None):
        await _each(ids, 32, one)


async def verify(
    store: StateStore, model: Any, *, to: int | None = None, schemas: SchemaRegistry | None = None
) -> MigrationReport:
    """Check, reading from storage, that every agent of ``model`` is at version ``to``
    (default: the model's) and loads as the model."""
    schema = _schema(model, schemas)
    target = schema.version if to is None else to
    report = MigrationReport("", schema.name, target, action="verify")
    started = time.monotonic()
    await _verify(store, schema, target, report)
    report.elapsed = time.monotonic() - started
    return report


async def _find(
    store: StateStore, agent_id: str, head: int, run_id: str
) -> tuple[Event | None, bool]:
    """The ``schema.migrate`` event of ``run_id`` in the agent's stream (searched from
    the head back) and whether a rollback of that run follows it."""
    window = 64
    while True:
        start = max(0, head - window)
        found: Event | None = None
        rolled = False
        async for event in store.history(agent_id, after_seq=start, to_seq=head):
            run = event.data.get("run")
            if event.type == MIGRATE_EVENT and run == run_id:
                found, rolled = event, False
            elif event.type == ROLLBACK_EVENT and run == run_id and found is not None:
                rolled = True
        if found is not None or start == 0:
            return found, rolled
        window *= 4


async def rollback(
    store: StateStore,
    model: Any,
    *,
    run_id: str | None = None,
    journal: str | os.PathLike[str] | None = None,
    schemas: SchemaRegistry | None = None,
    force: bool = False,
    concurrency: int = 32,
    on_progress: Progress | None = None,
) -> MigrationReport:
    """Undo migration run ``run_id`` (or the one in ``journal``): every agent it
    migrated gets its pre-migration state back, as a ``schema.rollback`` event at the
    pre-migration version. An agent written since its migration is brought back
    through the model's downcasters; without them it is reported in ``failed`` and
    left alone — unless ``force``, which restores the pre-migration state (the later
    writes stay in the stream's history). Refused once the run was finalized."""
    schema = _schema(model, schemas)
    path = Path(journal) if journal is not None else None
    record = Journal.load(path) if path is not None else None
    if record is not None:
        if record.finalized:
            raise MigrationError(
                f"run {record.run_id} of {record.model} was finalized: it cannot be rolled back"
            )
        if run_id is None:
            run_id = record.run_id
    if run_id is None:
        raise InvalidArgument("run_id", "give the run id of the migration (or its journal)")
    started = time.monotonic()
    report = MigrationReport(run_id, schema.name, 0, action="rollback")
    report.total = await store.count_agents()

    async def one(agent_id: str) -> None:
        for _attempt in range(_RETRIES):
            snap = await store.get(agent_id)
            if snap is None:
                return
            if snap.data.get(MODEL_KEY) not in schema.names():
                report.other += 1
                return
            event, rolled = await _find(store, agent_id, snap.seq, run_id)
            if event is None or rolled:
                report.unchanged += 1
                return
            before = await store.load(agent_id, at_seq=event.seq - 1)
            back_to = before.schema_version
            report.target = back_to
            if event.seq == snap.seq:
                doc = before.data
            else:  # written since the migration
                try:
                    doc = {
                        MODEL_KEY: schema.name,
                        **schema.convert(
                            snap.data, snap.schema_version, back_to, agent_id=agent_id,
                            seq=snap.seq,
                        ),
                    }  # fmt: skip
                except SchemaError as exc:
                    if not force:
                        report.failed.append(
                            MigrationFailure(
                                agent_id,
                                snap.seq,
                                snap.schema_version,
                                f"written since its migration (seq {event.seq}) and {exc}; "
                                "--force restores the pre-migration state",
                                "RollbackBlocked",
                            )
                        )
                        return
                    doc = before.data
            info = {"run": run_id, "model": schema.name, "migration_seq": event.seq,
                    "from": snap.schema_version, "to": back_to}  # fmt: skip
            try:
                await store.append(
                    agent_id,
                    ROLLBACK_EVENT,
                    info,
                    ops=patch.diff(snap.data, doc),
                    expected_seq=snap.seq,
                    schema_version=back_to,
                )
            except ConflictError:
                report.retries += 1
                continue
            report.changed += 1
            return

    done = 0
    async for ids in _pages(store, None):
        await _each(ids, concurrency, one)
        await store.flush()
        done += len(ids)
        report.scanned += len(ids)
        if on_progress is not None:
            on_progress(done, report.total)
    if record is not None and path is not None and not report.failed:
        record.rolled_back = True
        record.save(path)
    report.elapsed = time.monotonic() - started
    return report


async def finalize(
    store: StateStore,
    model: Any,
    *,
    journal: str | os.PathLike[str],
    schemas: SchemaRegistry | None = None,
) -> MigrationReport:
    """Close the rollback window of the run in ``journal``: migrate any agent still
    below the target (written by old code during the rollout), verify every agent of
    the model, and mark the run finalized — :func:`rollback` refuses it from then on.
    Refused (MigrationError) when agents fail to migrate or verify."""
    path = Path(journal)
    record = Journal.load(path)
    if record is None:
        raise MigrationError(f"no migration journal at {path}")
    if record.rolled_back:
        raise MigrationError(f"run {record.run_id} was rolled back: migrate again first")
    report = await migrate(
        store, model, to=record.target, schemas=schemas, journal=path, check=True
    )
    report.action = "finalize"
    if not report.ok:
        raise MigrationError(
            f"cannot finalize run {record.run_id}: {len(report.failed)} agent(s) failed to "
            f"migrate, {len(report.problems)} failed verification"
        )
    record = Journal.load(path)
    assert record is not None
    record.finalized = True
    record.save(path)
    return report
