"""Undo or close a migration run: :func:`rollback` gives every agent it migrated its
pre-migration state back, :func:`finalize` closes the rollback window.

An agent migrated by rewrite (:mod:`.rewrite`) and not written since gets its
pre-migration records back byte for byte, with the same compare-and-set rewrite;
one written since (or migrated by an appended ``schema.migrate`` event) gets its state
back as an appended ``schema.rollback`` event, through the model's downcasters.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import patch
from ..errors import (
    ConflictError,
    InvalidArgument,
    MigrationError,
    RewriteBelowPrunedBase,
    SchemaError,
    SchemaVersionTooNew,
    SerializationError,
)
from ..records import Event
from .models import MODEL_KEY
from .registry import SchemaRegistry
from .report import (
    RETRIES,
    Journal,
    MigrationFailure,
    MigrationReport,
    Progress,
    each,
    failure,
    model_schema,
    pages,
    pause,
    refuse_other_store,
    require_admin,
)
from .rewrite import (
    Original,
    Rewrite,
    kept_in,
    original,
    original_body,
    read_heads,
    read_page,
    restore_request,
    shown,
    stored,
    strip_request,
)
from .running import holds_journal

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["finalize", "rollback"]

MIGRATE_EVENT = "schema.migrate"
ROLLBACK_EVENT = "schema.rollback"


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
            run = event.info.get("run")
            if event.type == MIGRATE_EVENT and run == run_id:
                found, rolled = event, False
            elif event.type == ROLLBACK_EVENT and run == run_id and found is not None:
                rolled = True
        if found is not None or start == 0:
            return found, rolled
        window *= 4


async def _rolled_since(store: StateStore, agent_id: str, seq: int, head: int, run: str) -> bool:
    async for event in store.history(agent_id, after_seq=seq, to_seq=head):
        if event.type == ROLLBACK_EVENT and event.info.get("run") == run:
            return True
    return False


async def _state_before(
    store: StateStore, agent_id: str, full: str, kept: Original
) -> dict[str, Any]:
    """The pre-migration document at ``kept.seq``: the state before it and the
    original event's ops."""
    body = original_body(store.codec, full, kept)
    base: Any = (await store.load(agent_id, at_seq=kept.seq - 1)).data if kept.seq > 1 else {}
    doc: dict[str, Any] = patch.apply(base, body.get("ops") or [], in_place=True)
    return doc


@holds_journal
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
    migrated gets its pre-migration state back — its records byte for byte when it was
    migrated by rewrite and not written since, else as a ``schema.rollback`` event at
    the pre-migration version. An agent written since its migration is brought back
    through the model's downcasters; without them it is reported in ``failed`` and
    left alone — unless ``force``, which restores the pre-migration state (the later
    writes stay in the stream's history). Refused once the run was finalized.
    ``journal`` is read and marked (rolled back) only when it holds the run rolled back:
    with a ``run_id`` of another run it is left as it is."""
    schema = model_schema(model, schemas)
    await require_admin(store, "migrate")  # as a principal: admin of its namespace
    path = Path(journal) if journal is not None else None
    record = Journal.load(path) if path is not None else None
    if record is not None and run_id not in (None, record.run_id):
        record = None  # the journal holds another run: it is neither read nor marked
    if record is not None and path is not None:
        refuse_other_store(path, record, store)
    if record is not None:
        if record.finalized:
            raise MigrationError(
                f"run {record.run_id} of {record.model} was finalized: it cannot be rolled back"
            )
        if run_id is None:
            run_id = record.run_id
    if run_id is None:
        raise InvalidArgument("run_id", "give the run id of the migration (or its journal)")
    run: str = run_id
    started = time.monotonic()
    report = MigrationReport(run, schema.name, None, action="rollback")
    report.total = await store.count_agents()
    codec = store.codec
    from .applying import apply_page, before_rewrites

    #: agents this run migrated (restored or not): none at all means no such run here
    found = [0]

    async def one(agent_id: str) -> None:
        from .applying import apply

        (full,) = stored(store, [agent_id])  # the id the records name
        refused: Exception | None = None  # the last try's refusal
        seq: int | None = None
        version: int | None = None
        for _attempt in range(RETRIES):
            if _attempt:  # refused (or its head moved): the bounded backoff of migrate
                await pause(_attempt)  # (was none: a hot agent's 50 tries in a few ms)
            snap = await store.get(agent_id)
            if snap is None:
                return
            if snap.data.get(MODEL_KEY) not in schema.names():
                report.other += 1
                return
            seq, version = snap.seq, snap.schema_version
            (head,) = await read_heads(store, [full])
            if head is None:
                return
            if head.seq != snap.seq:
                report.retries += 1
                refused = None  # (its head moved between the two reads)
                continue
            kept = kept_in(codec, full, head.event) if head.event is not None else None
            if kept is not None and kept.run == run:
                found[0] += 1
                request = restore_request(codec, head, full, kept)
                if request is not None:  # not written since: the records byte for byte
                    try:
                        await before_rewrites(store, [full])
                        await apply(store, request)
                    except (ConflictError, RewriteBelowPrunedBase) as exc:  # (planned again)
                        report.retries += 1
                        refused = exc
                        continue
                    report.target = kept.version
                    report.changed += 1
                    return
            else:
                kept = await original(store, full, run)
                found[0] += kept is not None
                if kept is not None and await _rolled_since(
                    store, agent_id, kept.seq, snap.seq, run
                ):
                    report.unchanged += 1
                    return
            before: dict[str, Any] | None = None
            if kept is not None:  # migrated by rewrite, written since
                # (its pre-migration state is read only when --force restores it: its
                # records are sealed with the key active at the migration, which a
                # rotation since may have retired; a downcast needs no key of old)
                migration_seq, back_to = kept.seq, kept.version
            else:
                event, rolled = await _find(store, agent_id, snap.seq, run)
                found[0] += event is not None
                if event is None or rolled:
                    report.unchanged += 1
                    return
                old = await store.load(agent_id, at_seq=event.seq - 1)
                migration_seq, back_to, before = event.seq, old.schema_version, old.data
            report.target = back_to
            if migration_seq == snap.seq and kept is None:
                doc = before
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
                                f"written since its migration (seq {migration_seq}) and "
                                f"{_cannot(schema.name, exc)}; --force restores the "
                                "pre-migration state and throws away the writes made "
                                "since (they stay in the history only)",
                                "RollbackBlocked",
                            )
                        )
                        return
                    if before is None:
                        assert kept is not None
                        before = await _state_before(store, agent_id, full, kept)
                    doc = before
                    report.forced += 1
            info = {"run": run, "model": schema.name, "migration_seq": migration_seq,
                    "from": snap.schema_version, "to": back_to}  # fmt: skip
            # the machine state as the version rolled back to names it (read at
            # back_to, a name renamed since would not be known)
            fsm = schema.state_name_back(snap.fsm_state, snap.schema_version, back_to)
            try:
                await store.append(
                    agent_id,
                    ROLLBACK_EVENT,
                    info,
                    ops=patch.diff(snap.data, doc),
                    fsm_state=fsm if fsm != snap.fsm_state else None,
                    expected_seq=snap.seq,
                    schema_version=back_to,
                )
            except ConflictError as exc:
                report.retries += 1
                refused = exc
                continue
            except SerializationError as exc:  # a downcast the codec cannot store
                report.failed.append(failure(agent_id, snap.seq, snap.schema_version, exc))
                return
            report.changed += 1
            return
        # refused on every try: reported (was: neither counted nor listed, the run
        # reported as a success with this agent left as it was)
        report.failed.append(_gave_up(agent_id, seq, version, refused, "rolled back"))

    done = 0
    async for ids in pages(store, None):
        # the page read once; every agent migrated by this run and not written since
        # is restored in one rewrite_many (one transaction on SQLite, one statement on
        # PostgreSQL); the others (written since, migrated by an appended event, or
        # their head moved meanwhile) one by one
        batch: list[Rewrite] = []
        versions: dict[str, int] = {}
        slow: list[str] = []
        full = stored(store, ids)  # the ids the records name
        pairs = await read_page(store, full)
        for agent_id, stored_id, (head, snap) in zip(ids, full, pairs, strict=True):
            if snap is None or head is None:
                continue
            if snap.data.get(MODEL_KEY) not in schema.names():
                report.other += 1
                continue
            kept = None
            if head.event is not None and head.seq == snap.seq:
                kept = kept_in(codec, stored_id, head.event)
            request = None
            if kept is not None and kept.run == run:
                request = restore_request(codec, head, stored_id, kept)
            if request is None:
                slow.append(agent_id)
                continue
            batch.append(request)
            versions[agent_id] = kept.version  # type: ignore[union-attr]
        found[0] += len(batch)
        if batch:  # (only the agents rewritten: a page of others keeps its witness marks)
            await before_rewrites(store, [r.request.agent_id for r in batch])
        for rewrite in await apply_page(store, batch):
            slow.append(shown(store, rewrite.request.agent_id))
            versions.pop(slow[-1])
        if versions:
            report.target = next(iter(versions.values()))
            report.changed += len(versions)
        await each(slow, concurrency, one)
        await store.flush()
        done += len(ids)
        report.scanned += len(ids)
        if on_progress is not None:
            on_progress(done, report.total)
    if record is None and not found[0]:
        raise MigrationError(
            f"no agent of {schema.name} holds a migration by run {run!r} (not the "
            "journal's run): never run on this store, or rolled back already; check the "
            "run id. Nothing was written"
        )
    if record is not None and path is not None and not report.failed:
        record.rolled_back = True
        record.save(path)
    report.elapsed = time.monotonic() - started
    return report


def _gave_up(
    agent_id: str, seq: int | None, version: int | None, refused: Exception | None, what: str
) -> MigrationFailure:
    """An agent whose write was refused on each of its :data:`RETRIES` tries (its head
    moved: a live writer; or a rewrite refused as planned before a retention prune):
    nothing of it written, the run reported failed on it."""
    kind = type(refused).__name__ if refused is not None else "ConflictError"
    why = str(refused) if refused is not None else "its head moved on every read"
    return MigrationFailure(
        agent_id,
        seq,
        version,
        f"not {what}: refused on each of {RETRIES} tries ({why}); nothing of it was "
        "written: run the same command again",
        kind,
    )


def _cannot(model: str, exc: SchemaError) -> str:
    """Why an agent's state cannot be brought back, in the terms of a rollback."""
    if isinstance(exc, SchemaVersionTooNew):  # (its own words are for a reader's code)
        return (
            f"{model} has no downcaster from schema version {exc.version} "
            f"(@schema.downcaster(from_version={exc.version}) brings such a state back)"
        )
    return str(exc)


async def _strip(store: StateStore, run_id: str, report: MigrationReport) -> None:
    """Drop the pre-migration bytes of ``run_id`` from every head event still holding
    them (a head written since keeps them in its history: a rewrite there would change
    the links of every later record)."""
    from .applying import apply, apply_page, before_rewrites

    codec = store.codec

    async def one(agent_id: str) -> None:  # (a stored id: see rewrite.stored)
        refused: Exception | None = None
        seq: int | None = None
        for _attempt in range(RETRIES):
            if _attempt:  # refused: the bounded backoff of migrate (was none)
                await pause(_attempt)
            (head,) = await read_heads(store, [agent_id])
            request = None if head is None else strip_request(codec, agent_id, head, run_id)
            if request is None:
                return
            seq = head.seq if head is not None else None
            try:
                await apply(store, request)
            except (ConflictError, RewriteBelowPrunedBase) as exc:  # (none, or S3 part-way)
                report.retries += 1
                refused = exc
                continue  # appended (or pruned) meanwhile: read the head again
            report.released += 1
            return
        # refused on every try: its head event still holds the pre-migration bytes
        report.failed.append(
            _gave_up(shown(store, agent_id), seq, None, refused, "released (its pre-migration "
                     "records are still in its head event)")
        )  # fmt: skip

    async for page in pages(store, None):
        ids = stored(store, page)  # the ids the records name
        await before_rewrites(store, ids)
        # the page's heads in one read, their rewrites in one rewrite_many; a head
        # that moved meanwhile is read again on its own
        batch: list[Rewrite] = []
        for agent_id, head in zip(ids, await read_heads(store, ids), strict=True):
            request = None if head is None else strip_request(codec, agent_id, head, run_id)
            if request is not None:
                batch.append(request)
        moved = await apply_page(store, batch)
        report.released += len(batch) - len(moved)
        await each([r.request.agent_id for r in moved], 32, one)


@holds_journal
async def finalize(
    store: StateStore,
    model: Any,
    *,
    journal: str | os.PathLike[str],
    schemas: SchemaRegistry | None = None,
) -> MigrationReport:
    """Close the rollback window of the run in ``journal``: migrate any agent still
    below the target (written by old code during the rollout), verify every agent of
    the model, drop the pre-migration bytes the run kept in head events, and mark the
    run finalized — :func:`rollback` refuses it from then on.
    Refused (MigrationError) when agents fail to migrate or verify. An agent whose
    release is refused on every try is reported in ``failed``; finalize again releases
    it (a finalized run's journal: the release only)."""
    from .migrate import migrate

    path = Path(journal)
    record = Journal.load(path)
    if record is None:
        raise MigrationError(f"no migration journal at {path}")
    refuse_other_store(path, record, store)
    if record.rolled_back:
        raise MigrationError(f"run {record.run_id} was rolled back: migrate again first")
    if record.finalized:  # finalized, an agent's release refused: release the rest
        name = model_schema(model, schemas).name
        if record.model != name:
            raise MigrationError(
                f"{path} is the journal of a migration of {record.model!r}, not {name!r}"
            )
        await require_admin(store, "migrate")
        started = time.monotonic()
        report = MigrationReport(record.run_id, name, record.target, action="finalize")
        await _strip(store, record.run_id, report)
        report.elapsed = time.monotonic() - started
        return report
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
    await _strip(store, record.run_id, report)
    return report
