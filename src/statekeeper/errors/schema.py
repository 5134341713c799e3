"""Schema evolution errors (statekeeper.schema): validation, versions, migrations.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from statekeeper.errors.base import InvalidArgument, StatekeeperError
from statekeeper.errors.storage import StorageError

# --- schema evolution (statekeeper.schema) ---------------------------------------------


def _fields(errors: list[tuple[str, str]], limit: int = 5) -> str:
    """``field: problem; field: problem`` (values never shown: they may be secrets)."""
    shown = "; ".join(f"{path or '(root)'}: {message}" for path, message in errors[:limit])
    more = f"; and {len(errors) - limit} more" if len(errors) > limit else ""
    return shown + more


class SchemaError(StatekeeperError):
    """Base class for errors about state models, schema versions and migrations."""


class ValidationError(SchemaError, InvalidArgument):
    """A typed agent's state does not match its model: nothing was written.

    ``model`` names the model, ``errors`` lists ``(field path, problem)`` pairs
    (``"messages[3].role"``, ``"Input should be 'user' or 'assistant'"``); the offending
    values are never part of the message. ``argument`` is ``"state.<first field>"``.
    """

    def __init__(self, model: str, errors: list[tuple[str, str]], agent_id: str | None = None):
        self.model = model
        self.errors = errors
        self.agent_id = agent_id
        self.fields = [path for path, _ in errors]
        where = f"agent {agent_id!r}: " if agent_id is not None else ""
        first = errors[0][0] if errors else ""
        super().__init__(
            f"state.{first}" if first else "state",
            f"{where}state does not match {model}: {_fields(errors)}; nothing was written",
        )


class StoredStateInvalid(SchemaError, StorageError):
    """A stored state (after its upcasters ran) does not match the model it is loaded
    as: typically a field was renamed or retyped without an upcaster for the stored
    version. ``version`` is the stored schema version, ``current`` the model's."""

    def __init__(
        self,
        agent_id: str,
        seq: int | None,
        model: str,
        version: int,
        current: int,
        errors: list[tuple[str, str]],
    ) -> None:
        self.agent_id = agent_id
        self.seq = seq
        self.model = model
        self.version = version
        self.current = current
        self.errors = errors
        self.fields = [path for path, _ in errors]
        at = f" seq {seq}" if seq is not None else ""
        hint = (
            f" (upcast from version {version} to {current} ran)"
            if version != current
            else " (a changed model needs a new version and an upcaster from this one)"
        )
        super().__init__(
            f"agent {agent_id!r}{at}: stored state (schema version {version}) does not load "
            f"as {model} version {current}: {_fields(errors)}{hint}"
        )


class SchemaMismatch(SchemaError, StorageError):
    """Stored data cannot be brought to this code's schema version: no upcaster (or
    downcaster) from ``version``, or it belongs to another model. Nothing is guessed:
    a wrong value is never returned. ``agent_id``/``seq`` say where (None when not
    loading a stored record)."""

    def __init__(self, message: str, *, agent_id: str | None = None, seq: int | None = None):
        self.agent_id = agent_id
        self.seq = seq
        where = ""
        if agent_id is not None:
            where = f"agent {agent_id!r}" + (f" seq {seq}" if seq is not None else "") + ": "
        super().__init__(where + message)


class MissingUpcaster(SchemaMismatch):
    """No upcaster is registered to take ``model`` from ``version`` to the next one."""

    def __init__(
        self,
        model: str,
        version: int,
        target: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.target = target
        super().__init__(
            f"{model} has no upcaster from schema version {version} (stored) towards "
            f"{target} (this code's); register one with @schema.upcaster(from_version="
            f"{version})",
            agent_id=agent_id,
            seq=seq,
        )


class SchemaVersionTooNew(SchemaMismatch):
    """Stored data was written by newer code (schema ``version`` > this code's
    ``current``) and no downcaster takes it back: this reader refuses rather than
    misread it."""

    def __init__(
        self,
        model: str,
        version: int,
        current: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.current = current
        super().__init__(
            f"{model} was stored at schema version {version}, newer than this code's "
            f"{current}, and no downcaster from version {version} is registered "
            "(upgrade this application, or register a downcaster)",
            agent_id=agent_id,
            seq=seq,
        )


class DowncastDropsFields(SchemaMismatch):
    """A write by older code over a state newer code stored (schema ``version`` >
    ``current``) would delete ``fields``: keys the downcasters dropped (the older code
    never saw them) that its model cannot carry (``extra="forbid"`` or ``"allow"`` at
    every depth keeps no key it was not given). Nothing was written: leave those keys
    in the document in the downcaster (a model with ``extra="forbid"`` refuses them:
    use the default ``"ignore"``), or write through the newer code."""

    def __init__(
        self,
        model: str,
        version: int,
        current: int,
        fields: list[str],
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.current = current
        self.fields = list(fields)
        super().__init__(
            f"{model} was stored at schema version {version}; the downcasters to this "
            f"code's {current} dropped {', '.join(map(repr, self.fields))}, which this "
            "model cannot carry: a write by this code would delete them, so nothing was "
            "written (leave them in the document in the downcaster, or write through "
            "the newer code)",
            agent_id=agent_id,
            seq=seq,
        )


class EventVersionTooNew(SchemaVersionTooNew):
    """A custom event (``event_type``) was recorded by newer code (schema ``version`` >
    this code's ``current``): its type and info may have a shape this code does not
    know — a newer version may have renamed it or changed its info — and events have no
    downcasters, so a typed history read refuses it rather than hand it out as if this
    code had recorded it."""

    def __init__(
        self,
        model: str,
        event_type: str,
        version: int,
        current: int,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.event_type = event_type
        self.version = version
        self.current = current
        SchemaMismatch.__init__(
            self,
            f"the {event_type!r} event of {model} was recorded at schema version {version}, "
            f"newer than this code's {current}: its type and info may be of a shape this "
            "code does not know (upgrade this application to read it)",
            agent_id=agent_id,
            seq=seq,
        )


class UpcasterFailed(SchemaMismatch):
    """An upcaster or downcaster raised, or did not return a document (a dict)."""

    def __init__(
        self,
        model: str,
        version: int,
        target: int,
        reason: str,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.target = target
        super().__init__(
            f"{model}: the caster from schema version {version} to {target} failed: {reason}",
            agent_id=agent_id,
            seq=seq,
        )


class MigrationError(SchemaError):
    """A migration cannot run as asked (finalized already, another run in progress, a
    rollback that would lose writes). Nothing more was written."""


class JournalInUse(MigrationError):
    """A migration to another target was given a journal that still holds an open run:
    one neither finalized nor rolled back. Starting the new run there would replace
    that run's record (its id, where to resume, its rollback), so it is refused.

    ``journal`` is the file, ``run_id``, ``model`` and ``target`` name the run it holds,
    ``state`` says how far it got. Finalize that run, roll it back, or give the new
    run another journal. Nothing was written.
    """

    def __init__(self, journal: str, run_id: str, model: str, target: int, state: str) -> None:
        self.journal = journal
        self.run_id = run_id
        self.model = model
        self.target = target
        self.state = state
        super().__init__(journal, run_id, model, target, state)

    def __str__(self) -> str:
        return (
            f"{self.journal} holds run {self.run_id} of {self.model!r} to version "
            f"{self.target}, {self.state}: finalize it (migrate --finalize, "
            "schema.finalize), roll it back (migrate --rollback, schema.rollback), or give "
            "this migration another journal (--journal FILE, journal=)"
        )


class JournalOfAnotherStore(MigrationError):
    """A migration journal was given with a store it does not belong to: it records
    a run on ``journal_store`` and this run is on ``store``. Resuming there would start
    after an agent of the other store (skipping this store's agents up to it), and a
    rollback or finalize would mark the other store's run. Nothing was written.

    ``journal`` is the file; ``journal_store`` and ``store`` name the two stores (their
    URLs without passwords, a SQLite file by its absolute path). Give this store's run
    its own journal (``--journal FILE``)."""

    def __init__(self, journal: str, journal_store: str, store: str) -> None:
        self.journal = journal
        self.journal_store = journal_store
        self.store = store
        super().__init__(journal, journal_store, store)

    def __str__(self) -> str:
        return (
            f"{self.journal} is the journal of a run on another store ({self.journal_store}),"
            f" not {self.store}: give this store's migration its own journal (--journal "
            "FILE, journal=)"
        )


class JournalBusy(MigrationError):
    """Another run (a migrate, rollback or finalize, in another process or task) is
    using this migration journal right now: two runs on one journal would overwrite
    each other's record. Nothing was written.

    ``journal`` is the file, ``holder`` says who holds it (pid, host, since when).
    Wait for that run to end; one whose process died holds nothing, and the next run
    on the journal resumes it.
    """

    def __init__(self, journal: str, holder: str) -> None:
        self.journal = journal
        self.holder = holder
        super().__init__(journal, holder)

    def __str__(self) -> str:
        return (
            f"{self.journal} is in use by a running migration ({self.holder}): wait for it "
            "to end (a run whose process died holds nothing: run migrate again to resume it)"
        )
