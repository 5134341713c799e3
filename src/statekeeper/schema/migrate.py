"""Bulk migrations: bring every stored state of a model to a schema version.

Loading already upcasts old states on the fly; a migration writes the upcast state
back so that old versions (and their upcasters) can be retired. For each agent whose
stored document names the model and whose schema version is not the target:

1. a page of 1,000 agents is read in a few calls: their head records as stored
   (:func:`.rewrite.read_heads`: one consistent read on SQLite and PostgreSQL) and their
   latest states (:meth:`StateStore.get_many`); each state is cast to the target
   (upcasters or downcasters) and validated against the model — an agent that fails
   is reported, never written;
2. the head record is rewritten in place with
   :meth:`~statekeeper.backends.base.Backend.rewrite`, the compare-and-set rewrite
   ``statekeeper rekey`` uses (capability ``REWRITE``): the head event's ops gain the
   upcast and its version becomes the target, a snapshot at the head is rewritten whole
   at the target, the head tag follows (so every stale cache of the agent, in any
   process, fails its compare-and-set and reads again; why the event and not only a
   snapshot: :mod:`.rewrite`). It applies only while the head is the one read: a live
   writer that appended meanwhile makes it re-read and retry, so the system keeps
   serving while a migration runs in batches;
3. the pre-migration bytes (event, snapshot at the head, head tag) are kept inside the
   rewritten event, in the same atomic write: :func:`.rewrite.original` reads them,
   :func:`~.rollback.rollback` puts them back byte for byte, and
   :func:`~.rollback.finalize` drops them and closes the window.

``method="append"`` migrates by appending one ``schema.migrate`` event per agent
instead (no rewrite: for a backend without ``REWRITE``, which ``method="rewrite"``
refuses with :class:`~statekeeper.errors.CapabilityUnsupported`); the rewrite method
also appends for the few streams it cannot rewrite (records from before chain links,
a head without tag, a head that is a retention base snapshot).

Each agent's migration is one atomic write, so a run killed at any instruction leaves
every agent either migrated or not; rerunning skips the migrated ones (their version
is the target) and, with a journal file, starts after the last finished page.
:func:`migrate` with ``dry_run=True`` writes nothing and reports counts per stored
version, a sample diff per version and the agents that would fail validation.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from .. import patch
from ..backends.base import Capability
from ..errors import (
    AgentForgotten,
    AgentNotFound,
    CapabilityUnsupported,
    ConflictError,
    InvalidArgument,
    MigrationError,
    RewriteBelowPrunedBase,
    SchemaError,
    SerializationError,
    StoredStateInvalid,
)
from ..records import Snapshot
from ..store.governed import governance_of
from .applying import apply, apply_page, before_rewrites
from .models import MODEL_KEY, field_errors
from .registry import ModelSchema, SchemaRegistry
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
    refuse_open,
    refuse_other_store,
    require_admin,
    store_identity,
)
from .rewrite import (
    Head,
    Rewrite,
    collection_paused,
    migrate_request,
    read_page,
    shown,
    states_of,
    stored,
)
from .running import holds_journal

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
METHODS = ("rewrite", "append")


def _target_doc(
    schema: ModelSchema[Any],
    doc: dict[str, Any],
    version: int,
    target: int,
    agent_id: str,
    seq: int,
) -> dict[str, Any]:
    """``doc`` cast to ``target``, validated (and in canonical form) when ``target`` is
    the model's own version. The keys the model does not declare are carried through
    unchanged (validation would drop them: a migration deletes only what a caster
    removed)."""
    cast = schema.convert(doc, version, target, agent_id=agent_id, seq=seq)
    if target == schema.version:
        # validated once: what schema.load does after its own (second) convert
        adapter = schema.adapter
        try:
            state = adapter.validate(cast)
        except pydantic.ValidationError as exc:
            raise StoredStateInvalid(
                agent_id, seq, schema.name, version, schema.version, field_errors(exc)
            ) from None
        # (validated just above); the undeclared keys carried, at any depth
        cast = adapter.keep(state, adapter.dump_validated(state), cast, agent_id)
    return {MODEL_KEY: schema.name, **cast}


@holds_journal
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
    method: str = "rewrite",
    on_progress: Progress | None = None,
) -> MigrationReport:
    """Bring every stored state of ``model`` (a class, a :class:`ModelSchema` or a
    stored name in ``schemas``) to schema version ``to`` (default: the model's).

    ``journal``: a file recording the run, so that an interrupted run resumes after
    its last finished page (and :func:`rollback`/:func:`finalize` find the run).
    ``check``: re-read every agent of the model from storage afterwards and report any
    not at the target or not loading (:attr:`MigrationReport.problems`).
    ``method``: ``"rewrite"`` (the head records rewritten in place, see the module
    docs) or ``"append"`` (a ``schema.migrate`` event appended per agent).
    ``on_progress(done, total)`` is called as agents are processed.
    """
    schema = model_schema(model, schemas)
    target = schema.version if to is None else to
    if type(target) is not int or target < 1:
        raise InvalidArgument("to", f"to must be a schema version >= 1, not {target!r}")
    if target > schema.version:  # no caster can reach it: refused before anything is read
        raise InvalidArgument(
            "to",
            f"to={target}: the newest schema version of {schema.name} this code knows is "
            f"{schema.version} (register the model at version {target}, with its upcaster,"
            " to migrate there)",
        )
    if type(concurrency) is not int or concurrency < 1:
        raise InvalidArgument("concurrency", "concurrency must be an int >= 1")
    if method not in METHODS:
        raise InvalidArgument("method", f"method must be 'rewrite' or 'append', not {method!r}")
    rewriting = method == "rewrite" and not dry_run
    if rewriting and not store.backend.supports(Capability.REWRITE):
        raise CapabilityUnsupported(
            store.backend.name,
            Capability.REWRITE.value,
            "a migration rewrites the head records in place; method='append' migrates "
            "by appending a schema.migrate event to each agent instead",
        )
    path = Path(journal) if journal is not None else None
    run = Journal(run_id=secrets.token_hex(6), model=schema.name, target=target)
    if path is not None:
        earlier = Journal.load(path)
        run.store = store_identity(store)
        if earlier is not None and not dry_run:
            refuse_other_store(path, earlier, store)
        if earlier is not None:
            if earlier.model != schema.name:
                raise MigrationError(
                    f"{path} is the journal of a migration of {earlier.model!r}, not "
                    f"{schema.name!r}: give another --journal"
                )
            if earlier.finalized and earlier.target == target:
                raise MigrationError(f"run {earlier.run_id} was finalized already")
            if earlier.target != target and not dry_run:
                refuse_open(path, earlier)
            if earlier.target == target and not earlier.rolled_back and not dry_run:
                run = earlier  # resume (or re-check) the same run
                run.done = False
                run.store = run.store or store_identity(store)
    governance = governance_of(store)
    await require_admin(store, "migrate")  # as a principal: admin of its namespace
    #: agents the run changed before this call (a resumed run's journal counts them)
    changed_before = run.changed
    started = time.monotonic()
    report = MigrationReport("" if dry_run else run.run_id, schema.name, target, dry_run=dry_run)
    report.total = await store.count_agents()
    report.resumed_after = run.after if not dry_run else None
    after = run.after if not dry_run else None
    codec = store.codec

    batched = rewriting
    RETRY, DONE = "retry", "done"
    #: the fields the casters remove from each agent planned, counted in
    #: ``report.removed`` once that agent is migrated (a failure, a retry that finds
    #: it migrated already: not counted)
    removing: dict[str, list[str]] = {}

    def migrated(agent_id: str) -> None:
        report.changed += 1
        removed = report.removed
        for key in removing.pop(agent_id, ()):
            removed[key] = removed.get(key, 0) + 1

    def plan(agent_id: str, snap: Snapshot | None, head: Head | None, attempt: int) -> Any:
        """One attempt's decision for an agent, without I/O: DONE (counted already),
        RETRY (written between the reads), a :class:`Rewrite` to apply, or the
        ``(doc, new, version, fsm)`` of a ``schema.migrate`` event to append."""
        if snap is None:
            return DONE
        doc = snap.data
        if doc.get(MODEL_KEY) not in schema.names():
            report.other += 1
            return DONE
        version = snap.schema_version
        if attempt == 0:
            report.versions[version] = report.versions.get(version, 0) + 1
        if version == target:
            report.unchanged += 1
            return DONE
        try:
            new = _target_doc(schema, doc, version, target, agent_id, snap.seq)
            if dry_run:  # what the run's write would refuse (the run: when it writes)
                codec.serialize(new, "state")
        except (SchemaError, SerializationError) as exc:
            report.failed.append(failure(agent_id, snap.seq, version, exc))
            return DONE
        # the fields the casters removed (or renamed)
        removing[agent_id] = [key for key in doc if key not in new]
        if version not in report.samples:
            report.samples[version] = {
                "agent_id": agent_id,
                "seq": snap.seq,
                "ops": patch.diff(doc, new),
                "before": doc,
                "after": new,
            }
        if dry_run:
            migrated(agent_id)
            return DONE
        # a machine state renamed up to the target is recorded under the target's name
        # (a target below the code's version: the renames up to it only)
        upto = version < target
        fsm = schema.state_name(snap.fsm_state, version, target) if upto else None
        if rewriting and head is not None:
            if head.seq != snap.seq:  # written between the two reads
                report.retries += 1
                return RETRY
            named = schema if upto else None
            try:
                request = migrate_request(codec, head, snap, new, target, run.run_id, fsm, named)
            except SerializationError as exc:  # an upcast the codec cannot store
                report.failed.append(failure(agent_id, snap.seq, version, exc))
                return DONE
            if request is not None:
                return request
        return doc, new, version, fsm

    async def one(
        agent_id: str,
        read: Snapshot | None,
        head: Head | None,
        first: int = 0,
        planned: Any = None,
    ) -> None:
        """Migrate one agent (a retry reads it again: the first attempt uses the
        page's batched reads, and ``planned``, its step when it was planned already).
        A write refused (its head moved; a rewrite planned before a retention prune:
        ``RewriteBelowPrunedBase``, nothing written — but by S3 part-way,
        ``maybe_applied``: the retry finishes it) is planned again on a fresh read,
        after a :func:`.report.pause`; refused :data:`.report.RETRIES` times, the agent
        is reported failed, with the prune's refusal when that was the last one."""
        pruned: RewriteBelowPrunedBase | None = None
        for _attempt in range(first, RETRIES):
            if _attempt and rewriting:  # (stored ids below the view: see rewrite.stored)
                ((head, read),) = await read_page(store, stored(store, [agent_id]))
            elif _attempt:
                read = (await states_of(store, [agent_id]))[0]
            step = (
                planned
                if planned is not None and _attempt == first
                else plan(agent_id, read, head, _attempt)
            )
            if step is DONE:
                return
            if step is RETRY:
                pruned = None
                await pause(_attempt)
                continue
            try:
                if isinstance(step, Rewrite):
                    await apply(store, step)
                else:
                    assert read is not None
                    doc, new, version, fsm = step
                    info = {"run": run.run_id, "model": schema.name, "from": version, "to": target}
                    await store.append(
                        agent_id,
                        MIGRATE_EVENT,
                        info,
                        ops=patch.diff(doc, new),
                        fsm_state=fsm if fsm != read.fsm_state else None,
                        expected_seq=read.seq,
                        schema_version=target,
                    )
            except (ConflictError, RewriteBelowPrunedBase) as exc:
                report.retries += 1
                pruned = exc if isinstance(exc, RewriteBelowPrunedBase) else None
                await pause(_attempt)
                continue
            except AgentNotFound:
                return
            except SerializationError as exc:  # an upcast the codec cannot store
                seq = read.seq if read is not None else None
                report.failed.append(failure(agent_id, seq, step[2], exc))
                return
            migrated(agent_id)
            return
        if pruned is not None:  # (planned again each time, refused by a prune each time)
            report.failed.append(failure(agent_id, read.seq if read else None, None, pruned))
            return
        report.failed.append(
            MigrationFailure(agent_id, None, None, "too many concurrent writes", "ConflictError")
        )

    done = 0
    async for ids in pages(store, after):
        # the page's head records and latest states in a few reads; the writes then
        # share commits (appends: the group committer)
        triples: list[tuple[str, Snapshot | None, Head | None]]
        if rewriting:  # the records read and rewritten name the stored ids
            await before_rewrites(store, full := stored(store, ids))
            pairs = await read_page(store, full)
            triples = [(a, state, head) for a, (head, state) in zip(ids, pairs, strict=True)]
        else:
            triples = [(a, s, None) for a, s in zip(ids, await states_of(store, ids), strict=True)]
        if batched:  # plan every rewrite of the page, apply them in one transaction
            batch: list[Rewrite] = []
            later: list[tuple[str, Snapshot | None, Head | None, int, Any]] = []
            with collection_paused():  # (no await inside: nothing else runs meanwhile)
                for agent_id, read, head in triples:
                    step = plan(agent_id, read, head, 0)
                    if isinstance(step, Rewrite):
                        batch.append(step)
                    elif step is RETRY:  # written between the reads: read again
                        later.append((agent_id, None, None, 1, None))
                    elif step is not DONE:  # a stream the rewrite cannot take: appended
                        later.append((agent_id, read, head, 0, step))
            moved = await apply_page(store, batch)
            left = {id(r) for r in moved}
            for r in batch:
                if id(r) not in left:
                    migrated(shown(store, r.request.agent_id))
            report.retries += len(moved)
            later += [(shown(store, r.request.agent_id), None, None, 1, None) for r in moved]
            await each(later, concurrency, lambda t: one(*t))
        else:
            await each(triples, concurrency, lambda t: one(*t))
        await store.flush()
        removing.clear()  # (the page's agents not migrated)
        done += len(ids)
        report.scanned += len(ids)
        if not dry_run and path is not None:
            run.after = ids[-1]
            run.changed = changed_before + report.changed
            run.save(path)
        if on_progress is not None:
            on_progress(done, report.total)
    if not dry_run:
        run.done = True
        run.changed = changed_before + report.changed
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
        except (AgentNotFound, AgentForgotten):  # (a forgotten agent has no state)
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
                report.problems.append(failure(agent_id, snap.seq, target, exc))

    async for ids in pages(store, None):
        await each(ids, 32, one)


async def verify(
    store: StateStore, model: Any, *, to: int | None = None, schemas: SchemaRegistry | None = None
) -> MigrationReport:
    """Check, reading from storage, that every agent of ``model`` is at version ``to``
    (default: the model's) and loads as the model."""
    schema = model_schema(model, schemas)
    target = schema.version if to is None else to
    report = MigrationReport("", schema.name, target, action="verify")
    started = time.monotonic()
    await _verify(store, schema, target, report)
    report.elapsed = time.monotonic() - started
    return report


# (at the end: rollback imports this module's names lazily, never at import time)
from .rollback import finalize, rollback  # noqa: E402
