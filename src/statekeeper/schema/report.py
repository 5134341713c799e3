"""What a migration run reports, the journal it keeps, and the page loop that every
pass of :mod:`.migrate` and :mod:`.rollback` shares."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import JournalInUse, JournalOfAnotherStore, MigrationError
from ..security.witness_file import write_atomically
from .registry import ModelSchema, SchemaRegistry, schema_of

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["Journal", "MigrationFailure", "MigrationReport", "Progress"]

PAGE = 1000
#: an agent whose write is refused (its head moved: a live writer; a rewrite planned
#: before a retention prune) is read, planned and written again this many times in all,
#: pausing (:func:`pause`) after each refusal; then it is reported, never written
RETRIES = 50


#: what :func:`pause` waits with (looked up at each pause: tests count the pauses, and
#: the time they stand for, through it, with no timing)
_sleep = asyncio.sleep


async def pause(attempt: int) -> None:
    """The pause after the write refused at try ``attempt`` (from 0) of an agent: 0.5 ms
    more after each, at most 20 ms (~0.6 s over :data:`RETRIES` tries), so that a
    migration, rollback or finalize retrying an agent under constant writes lets the
    writer run (and outlasts a burst of its writes instead of spending every try in a
    few milliseconds of it)."""
    await _sleep(min(0.0005 * attempt, 0.02))


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
    #: the version migrated to; a rollback: the version restored to, None when it
    #: restored no agent (nothing of the run left to roll back)
    target: int | None
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
    #: the stored fields the casters removed (or renamed), with how many of the agents
    #: migrated had them (the keys a model does not declare are kept: only a caster
    #: removes a field)
    removed: dict[str, int] = field(default_factory=dict)
    #: one example per stored version: agent, ops, document before and after
    samples: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: agents checked by the verification pass, and the problems it found
    verified: int = 0
    problems: list[MigrationFailure] = field(default_factory=list)
    #: rollback with ``force``: agents written since their migration whose
    #: pre-migration state was restored all the same (those writes thrown away)
    forced: int = 0
    #: agents whose kept pre-migration records finalize dropped
    released: int = 0
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
    #: the store the run is on (:func:`store_identity`; None: not recorded)
    store: str | None = None

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
                store=None if doc.get("store") is None else str(doc["store"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MigrationError(f"{path} is not a readable migration journal ({exc})") from None

    def save(self, path: Path) -> None:
        """Write atomically and durably (temp file, fsync, rename)."""
        self.updated_at = time.time()
        doc = {"statekeeper_migration": 1, **asdict(self)}
        write_atomically(path, json.dumps(doc, indent=2))


def store_identity(store: StateStore) -> str | None:
    """What names ``store`` in a journal (see :func:`statekeeper.backends.identity.store_identity`):
    its URL without passwords, a SQLite file by its absolute path, and the namespace
    the store is opened in; None for a memory store (it dies with its process, and so
    does any run on it)."""
    from ..backends.identity import store_identity as identity

    found = identity(store.backend)
    namespace = getattr(store, "namespace", "")
    if found is not None and isinstance(namespace, str) and namespace:
        # a run in one namespace is not a run in another (nor in the whole store)
        found += f" (namespace {namespace!r})"
    return found


async def require_admin(store: StateStore, operation: str) -> None:
    """On a store opened as a principal: :class:`~statekeeper.errors.AccessDenied`
    (audited) unless it has ``admin`` on the store's namespace and every namespace
    below it (``**`` for the whole store). A migration, a rollback and a finalize
    rewrite records below the store's per-agent checks, in that namespace only."""
    from ..store.governed import governance_of

    governance = governance_of(store)
    if governance is not None:
        namespace = getattr(store, "namespace", "")  # ("": the whole store, **)
        await governance.require_namespace(namespace or "", "admin", operation)


def refuse_other_store(path: Path, record: Journal, store: StateStore) -> str | None:
    """:class:`JournalOfAnotherStore` when ``record`` names a store other than
    ``store``; else ``store``'s identity (to record)."""
    mine = store_identity(store)
    if record.store is not None and mine is not None and record.store != mine:
        raise JournalOfAnotherStore(str(path), record.store, mine)
    return mine


def refuse_open(path: Path, record: Journal) -> None:
    """JournalInUse when ``record`` (read from ``path``) is a run neither finalized nor
    rolled back: a new run must not replace the record of one still open."""
    if record.finalized or record.rolled_back:
        return
    if record.done:
        state = "migrated, its rollback window still open"
    elif record.after is not None:
        state = f"interrupted after agent {record.after!r}"
    else:
        state = "started, not finished"
    raise JournalInUse(str(path), record.run_id, record.model, record.target, state)


Progress = Callable[[int, int], Any]


def model_schema(model: Any, schemas: SchemaRegistry | None) -> ModelSchema[Any]:
    if isinstance(model, str):
        return (schemas if schemas is not None else _default()).get(model)
    return schema_of(model, schemas)


def _default() -> SchemaRegistry:
    from .registry import registry

    return registry


def failure(
    agent_id: str, seq: int | None, version: int | None, exc: Exception
) -> MigrationFailure:
    return MigrationFailure(
        agent_id, seq, version, str(exc), type(exc).__name__, list(getattr(exc, "fields", []))
    )


async def pages(store: StateStore, after: str | None) -> Any:
    while True:
        page = await store.list_agents(after=after, limit=PAGE)
        if page:
            yield [info.agent_id for info in page]
        if len(page) < PAGE:
            return
        after = page[-1].agent_id


async def each(items: list[Any], concurrency: int, fn: Callable[[Any], Any]) -> None:
    """Run ``fn`` over ``items`` with at most ``concurrency`` at a time."""
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
