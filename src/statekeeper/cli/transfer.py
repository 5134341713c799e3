"""``statekeeper export`` / ``statekeeper import``: agents as JSON Lines, between any
two stores (SQLite, PostgreSQL, Redis…, with or without keys on either side).

The file: a header line ``{"format": "statekeeper-export", "version": 1, ...}``, then
per agent one line per event, oldest first — ``{"agent_id", "seq", "type", "ts",
"info", "ops", "fsm", "actor", "key", "v"}`` (``ts`` is the event's timestamp in epoch
seconds, ``ops`` its JSON Patch, ``fsm`` the state it moved the machine to) — and an
``{"end": agent_id, "seq", "state", "schema_version"}`` line with the head (version 3:
and ``"lease_token"``, the agent's newest fencing token, when it ever had a lease;
``import`` raises the target's token to it before it writes any agent, so the
target's next grant is greater than every token the source granted); the file
ends with a completion line (:mod:`.export_file`: a cut-short file is refused). An agent
retention compacted (``keep_last``: its history before a base snapshot is gone)
starts with a ``{"base": agent_id, "seq", "state", "data", "schema_version",
"created_at", "updated_at", "entered"}`` line, the state at its base (what
``load(at_seq=seq)`` returns), and its events start after it. Typed values
(datetimes, sets…) keep the codec's tagged JSON form. Records are written decrypted:
protect the file.

``import`` checks the whole file before writing anything (well-formed lines, seqs
from 1 without gaps, an end line per agent, no agent that already exists in the
target), then replays every event through the store API with its original timestamp
(re-encoded, re-chained and, with a key, re-encrypted by the target store), and
verifies each imported agent: the events read back equal the file's, the head state
equals the end line and the file's events folded independently, and ``verify`` finds
no problem. An agent with a base line is created compacted at that base, as retention
left it (:func:`statekeeper.store.based.create_from_base`): ``load`` of the base and
of every seq after it reads what the source's did, and the history before it is
compacted there too.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from .. import patch
from ..backends.base import Capability
from ..errors import (
    AccessDenied,
    AgentForgotten,
    AgentNotFound,
    ConfigurationError,
    HistoryCompacted,
    IntegrityError,
)
from . import import_undo as _undo
from . import render
from ._markup import escape
from .app import (
    DbOption,
    JsonOption,
    KeyFileOption,
    app,
    err_console,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)
from .export_base import base_line, state_of
from .export_base import event_line as _event_line
from .export_file import FORMAT, Ending, Sealed, completion_line, store_header
from .export_holds import HeldLines, place_holds
from .export_listing import every_agent_id
from .import_lines import ImportedAgent as _Agent
from .import_lines import creatable
from .import_lines import parse_lines as _parse
from .import_resume import as_written as _as_written
from .import_resume import data_at, same_at, stored_start
from .import_resume import interrupted as _interrupted
from .import_write import write_agent as _write
from .stores import refuse_in_memory

if TYPE_CHECKING:
    from ..store import StateStore
    from ..store.holds import Hold

__all__ = ["export_agents", "import_agents"]

#: skipped agents named in the text output of ``import --skip-existing``
_NAMED = 5

_log = logging.getLogger("statekeeper.cli.import")


async def export_agents(
    store: StateStore,
    agent_ids: list[str] | None,
    out: IO[bytes],
    progress: Any = None,
    deleted: list[str] | None = None,
) -> tuple[int, int, list[str]]:
    """Write the agents (every agent when ``agent_ids`` is None) to ``out``; returns
    ``(agents, events, forgotten)``.

    An export of the whole store leaves out the agents ``statekeeper forget`` shredded
    (nothing of them can be decrypted) and returns their ids, for the command to say so,
    as a backup does; an agent named in ``agent_ids`` that was forgotten raises
    :class:`~statekeeper.errors.AgentForgotten`. It leaves out an agent listed and
    deleted before it was read too (ids appended to ``deleted``), as a backup counts
    one "vanished"; an agent named in ``agent_ids`` that does not exist raises
    :class:`~statekeeper.errors.AgentNotFound`."""
    from ..governance.holds import list_holds
    from ..security.rekey_checks import data_key_sealed
    from ..store.namespaced import stored_id

    dumps = store.codec.copy_dumps
    out.write(dumps(await store_header(store, str(render.iso(_now())))) + b"\n")
    sealed = Sealed(out)  # every line after the header digested, for the completion line
    ids: Any = agent_ids if agent_ids is not None else None
    total = len(agent_ids) if agent_ids is not None else await store.count_agents()
    task = progress.add_task("export", total=total) if progress is not None else None
    agents = events = 0
    forgotten: list[str] = []
    deleted = [] if deleted is None else deleted
    held = HeldLines(store, await list_holds(store), whole=ids is None)

    async def each() -> Any:
        if ids is not None:
            for a in ids:
                yield a
        else:
            async for agent_id in every_agent_id(store):  # (unlisted ones too)
                yield agent_id

    async for agent_id in each():
        head = await store.head(agent_id)
        try:
            if head == 0:
                raise AgentNotFound(agent_id)
            # the head state first: a shredded agent is found before any line of it
            snap = await store.load(agent_id, at_seq=head)
        except (AgentForgotten, AgentNotFound) as exc:
            if ids is not None:
                raise
            # shredded, or listed and gone since: deleted while the export ran
            (forgotten if isinstance(exc, AgentForgotten) else deleted).append(agent_id)
            if progress is not None:
                progress.advance(task)
            continue
        written = 0
        try:
            async for ev in store.history(agent_id, to_seq=head):
                sealed.write(dumps(_event_line(ev)) + b"\n")
                written += 1
        except HistoryCompacted as exc:  # retention compacted it: its base, then the rest
            if written:  # (compacted while this export read it: no file to trust)
                raise
            base = await store.load(agent_id, at_seq=exc.base_seq)
            sealed.write(dumps(base_line(base)) + b"\n")
            async for ev in store.history(agent_id, after_seq=exc.base_seq, to_seq=head):
                sealed.write(dumps(_event_line(ev)) + b"\n")
                written += 1
        events += written
        end = {
            "end": agent_id,
            "seq": head,
            "state": snap.fsm_state,
            "schema_version": snap.schema_version,
        }
        token = await _lease_token(store, agent_id)
        if token:  # the newest fencing token, for the target's next grant to pass it
            end["lease_token"] = token
        if store.codec.key_family is not None and not await data_key_sealed(
            store, stored_id(store, agent_id)
        ):  # (import: another store's forget of the id is not this agent's)
            end["data_key"] = False
        sealed.write(dumps(end) + b"\n")
        held.agent(agent_id)
        agents += 1
        if progress is not None:
            progress.advance(task)
    for line in held.lines():  # the legal holds on what it exported (.export_holds)
        sealed.write(dumps(line) + b"\n")
    sealed.write(dumps(completion_line(agents, events, sealed.digest())) + b"\n")
    return agents, events, forgotten


async def _lease_token(store: StateStore, agent_id: str) -> int:
    """The agent's newest fencing token (0: it never had a lease, or the engine has
    none)."""
    from ..store.namespaced import stored_id

    if not store.backend.supports_leases:
        return 0
    lease = await store.backend.get_lease(stored_id(store, agent_id))
    return lease.token if lease is not None else 0


async def _check(store: StateStore, agent: _Agent) -> None:
    """The imported agent reads back exactly as the file says."""
    agent_id = agent.agent_id
    base = agent.base
    # (past the file's base when a retention run compacted what a stopped import left)
    start = await stored_start(store, agent)
    got = [_event_line(ev) async for ev in store.history(agent_id, after_seq=start)]
    want = agent.events[start - agent.base_seq :]
    if len(got) != len(want):
        raise IntegrityError(agent_id, None, f"imported {len(got)} event(s), file has {len(want)}")
    for g, w in zip(got, want, strict=True):
        if g != _as_written(store, w):
            raise IntegrityError(agent_id, g["seq"], "imported event differs from the file")
    snap = await store.load(agent_id)
    end = agent.end or {}
    if start > agent.base_seq:
        if not await same_at(store, agent, start):
            raise IntegrityError(agent_id, start, "stored base state differs from the file")
        folded, rest = data_at(agent, start), want
    elif base is not None:
        if state_of(await store.load(agent_id, at_seq=base.seq)) != state_of(base):
            raise IntegrityError(agent_id, base.seq, "imported base state differs from the file")
        if agent.base_seq > 1:  # compacted before it there too
            try:
                await store.load(agent_id, at_seq=base.seq - 1)
            except HistoryCompacted:
                pass
            else:
                raise IntegrityError(agent_id, base.seq, "imported agent is not compacted")
        folded = copy.deepcopy(base.data)
        rest = want
    else:
        folded = copy.deepcopy(want[0]["ops"][0]["value"])
        rest = want[1:]
    for line in rest:
        folded = patch.apply(folded, copy.deepcopy(line["ops"]))
    differs = [
        f"{what} (the file's end line says {said!r}, its events give {got!r})"
        for what, said, got in (
            ("seq", end.get("seq"), snap.seq),
            ("state", end.get("state"), snap.fsm_state),
            ("schema version", end.get("schema_version"), snap.schema_version),
        )
        if said != got
    ]
    if snap.data != folded:
        differs.append("data (the events folded in the file and in the store differ)")
    if differs:
        raise IntegrityError(
            agent_id,
            snap.seq,
            f"imported head state differs from the file: {'; '.join(differs)}",
        )
    report = await store.verify([agent_id])
    if not report.ok:
        raise IntegrityError(agent_id, None, f"verify after import: {report.problems[0].reason}")


async def import_agents(
    url: str,
    source: IO[bytes],
    *,
    progress: Any = None,
    skip_existing: bool = False,
    key_file: Path | None = None,
    forgotten: list[str] | None = None,
    holds_placed: list[str] | None = None,
) -> tuple[int, int, list[str]]:
    """Import every agent in ``source`` into the store at ``url``; returns ``(agents,
    events, skipped ids)``.

    An agent the target's key vault shredded (``forget``: its id keeps a tombstone and
    can never be written again), in the target store or in the store the file was
    exported from (its header names that store's key family), is passed over, its id
    appended to ``forgotten``, as every store-wide job passes over a forgotten agent;
    one the target still stores is an existing agent (refused, or skipped with
    ``skip_existing``).

    Under ``--as`` the store is opened as that principal, and every agent of the file
    needs ``admin`` on its namespace (an import writes history as others wrote it,
    their actors and times, as a restore does), checked for all of them before any is
    written; a refusal is audited."""
    from ..governance.backup.restoretarget import floor_over_bases
    from ..store import StateStore
    from ..store.feed_deletes import has_feed, record_restored
    from ..store.governed import governance_of
    from ..store.keyguard import key_family
    from ..store.namespaced import stored_id
    from .stores import check_store, env_keyring, governance_options, namespace_options

    keyring = env_keyring(key_file)
    await (await check_store(url)).close()  # import into a store, never create one
    stamp = [0.0]
    # the original timestamps: the store stamps each event with its clock (ids are
    # relative to --namespace when it is given)
    options = {**governance_options(keyring), **namespace_options()}
    store = StateStore(url, keyring=keyring, clock=lambda: stamp[0], **options)
    try:
        header = Ending()
        holds: list[Hold] = []
        try:
            agents = _parse(store, enumerate(source, 1), header, holds)
        except ConfigurationError as exc:  # "line N: ..." of which file
            raise ConfigurationError(f"{getattr(source, 'name', 'stdin')}, {exc}") from None
        based = [a.agent_id for a in agents if a.base is not None]
        if based and not store.backend.supports(Capability.BASE_IMPORT):
            raise ConfigurationError(
                f"agent {based[0]!r} was compacted by retention (it starts at a base "
                f"snapshot): the {store.backend.name} engine cannot store a stream that starts "
                "so; nothing was imported"
            )
        governance = governance_of(store)
        if governance is not None:
            for agent in agents:
                try:
                    await governance.require(stored_id(store, agent.agent_id), "admin", "import")
                except AccessDenied as exc:
                    relative = getattr(store, "relative_error", None)
                    raise (relative(exc) if relative is not None else exc) from None
        skipped: list[str] = []
        left: dict[str, int] = {}  # skipped compacted agents -> their base
        todo: list[tuple[_Agent, int]] = []
        for agent in agents:
            head = await store.head(agent.agent_id)
            if head and await _interrupted(store, agent, head):
                todo.append((agent, head))  # completed, not skipped
            elif head:
                if not skip_existing:
                    raise ConfigurationError(
                        f"agent {agent.agent_id!r} already exists in the target store; "
                        "nothing was imported (--skip-existing imports the others)"
                    )
                skipped.append(agent.agent_id)
                if agent.base is not None and head == agent.base_seq + len(agent.events):
                    left[stored_id(store, agent.agent_id)] = agent.base_seq  # (at its head)
            elif _undo.shredded(
                store, stored_id(store, agent.agent_id), header.key_family, agent.data_key
            ):
                if forgotten is not None:
                    forgotten.append(agent.agent_id)
            else:
                creatable(store, agent.agent_id)
                todo.append((agent, 0))
        # the key checked before the first write (a hold, a token, a tombstone, an
        # agent): an import refused for want of it writes nothing
        if holds or todo:
            await store._ready(write=True)
        # the file's legal holds first: no agent of it is ever stored unheld (.export_holds)
        placed = await place_holds(store, holds, f"export {getattr(source, 'name', 'stdin')}")
        if holds_placed is not None:
            holds_placed.extend(placed)
        # the source's newest fencing tokens next, before the agents: the target's next
        # grant passes every token the source granted (a moved lease is not held)
        await store.backend.carry_lease_tokens(
            [(stored_id(store, a.agent_id), a.lease_token) for a, _ in todo if a.lease_token]
        )
        task = progress.add_task("import", total=len(todo)) if progress is not None else None
        events = 0
        if todo and header.encrypted and not store.codec.encrypted:
            _log.warning(
                "%s was exported from an encrypted store: its records are now stored in"
                " this store, which is not encrypted (readable without a key)",
                getattr(source, "name", "stdin"),
            )
        # a tombstone of each new agent first: a subscriber still holding events of one
        # (expired: no tombstone) drops them before these come (was: applied twice)
        fresh = [stored_id(store, a.agent_id) for a, stored in todo if not stored]
        if fresh and has_feed(store.backend):
            await key_family(store.backend, store.codec)
            await record_restored(store.backend, store.codec, fresh)
        for agent, stored in todo:
            last: list[tuple[int, bytes | None] | None] = []
            await _undo.written(
                _write(store, agent, stamp, stored, last), store, agent, stored, last
            )
            await store.flush()
            wrote = await _undo.written_identity(store, agent)  # (its undo names it)
            try:
                await _check(store, agent)
            except IntegrityError as exc:
                raise await _undo.undo(store, agent, stored, exc, wrote) from None
            events += len(agent.events) - (stored - agent.base_seq if stored else 0)
            if progress is not None:
                progress.advance(task)
        # compacted agents start past their base: the feed's floor goes over them
        bases = {stored_id(store, a.agent_id): a.base_seq for a, _ in todo if a.base is not None}
        # (and those skipped at the file's head: an import stopped before this, run
        # again with --skip-existing, writes none of them)
        await floor_over_bases(store, bases, left)
        return len(todo), events, skipped
    finally:
        await store.close()


def _now() -> float:
    import time

    return time.time()


@app.command("export")
@handled
def export_cmd(
    ctx: typer.Context,
    agent_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[AGENT]...", help="Agents to export [default: every agent]."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write to FILE, or - for stdout [default: stdout]. The records are"
            " written decrypted.",
        ),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Write agents (events and head state) as JSON Lines."""
    from .progress import bar

    if output is not None and str(output) == "-":
        output = None  # stdout, as `import -` reads stdin (a file named - is ./-)
    url = resolve_url(ctx, db)
    if output is not None:
        from .files import check_output_file

        check_output_file(output, "statekeeper export file", _is_export)

    deleted: list[str] = []

    async def go(out: IO[bytes]) -> tuple[int, int, list[str]]:
        async with open_store(url, key_file=key_file) as store:
            if output is not None and store.codec.encrypted:
                # the records are written decrypted: the file is its owner's only, as a
                # key file is (before any is written; stdout is the caller's to guard)
                os.fchmod(out.fileno(), 0o600)
            with bar("exporting", disable=json_out or output is None) as progress:
                return await export_agents(store, agent_ids or None, out, progress, deleted)

    def left_out(forgotten: list[str]) -> str:
        notes = [(forgotten, "forgotten agent(s) (their data keys are destroyed)")]
        notes.append((deleted, "agent(s) deleted while the export ran (listed, then gone)"))
        return "\n".join(
            f"left out {len(ids)} {what}: " + escape(", ".join(ids)) for ids, what in notes if ids
        )

    if output is None:
        agents, events, forgotten = run(go(sys.stdout.buffer))
        sys.stdout.flush()
        if forgotten or deleted:  # stdout is the file: the notice goes to stderr
            err_console().print(left_out(forgotten))
        return
    from .._files import NO_ROOM, new_temporary, replace_durably

    fd, tmp = new_temporary(output)  # never an existing file, never through a symlink
    try:
        try:
            with os.fdopen(fd, "wb") as fh:
                agents, events, forgotten = run(go(fh))
                replace_durably(fh, tmp, output)  # fsync, rename, fsync the folder
        except OSError as exc:  # a full disk: the file written is named (also when the
            # close after a failed write fails again on the bytes still buffered: was
            # "error: No space left on device", no file named — trialdisk)
            if exc.filename is None and exc.errno in NO_ROOM:
                exc.filename = str(output)
            raise
    finally:
        tmp.unlink(missing_ok=True)
    if json_out:
        render.print_json(
            {"agents": agents, "events": events, "forgotten": forgotten, "deleted": deleted,
             "file": str(output)}
        )  # fmt: skip
    else:
        out_console().print(
            f"exported {agents} agent(s), {events} event(s) to {escape(str(output))}"
        )
        if forgotten or deleted:
            out_console().print(left_out(forgotten))


def _is_export(path: Path) -> bool:
    """The file starts with an export header (so it may be replaced by a new export)."""
    import json

    try:
        with path.open("rb") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("format") == FORMAT


@app.command("import")
@handled
def import_cmd(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(metavar="FILE", help="An export file, or - for stdin.")],
    skip_existing: Annotated[
        bool,
        typer.Option("--skip-existing", help="Skip agents the target already has."),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Import agents from a JSON Lines export, then verify them."""
    from .progress import bar

    url = resolve_url(ctx, db)
    refuse_in_memory(url, "import")
    from .file_kinds import check_head, check_input_file

    if file == "-":
        data = sys.stdin.buffer.read()
        check_head("stdin", data[:64], "export")  # a store, a backup...
        source: IO[bytes] = io.BytesIO(data)
    else:
        path = Path(file)
        if not path.exists():
            raise ConfigurationError(f"no such file: {path}")
        check_input_file(path, "export")  # a folder, a device, a store, a backup...
        try:
            source = path.open("rb")
        except OSError as exc:
            raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None

    forgotten: list[str] = []
    placed: list[str] = []

    async def go() -> tuple[int, int, list[str]]:
        with bar("importing", disable=json_out) as progress:
            return await import_agents(
                url,
                source,
                progress=progress,
                skip_existing=skip_existing,
                key_file=key_file,
                forgotten=forgotten,
                holds_placed=placed,
            )

    try:
        agents, events, skipped = run(go())
    finally:
        source.close()
    if json_out:
        render.print_json(
            {
                "agents": agents,
                "events": events,
                "skipped": skipped,
                "forgotten": forgotten,
                "holds_placed": placed,
                "verified": True,
            }
        )
        return
    console = out_console()
    console.print(f"[green]✓[/] imported {agents} agent(s), {events} event(s); verified")
    for pattern in placed:
        console.print(f"placed a legal hold on {escape(repr(pattern))} (held in the export)")
    if skipped:  # the first few (hundreds would fill the terminal): --json lists them all
        shown = ", ".join(skipped[:_NAMED])
        more = f" and {len(skipped) - _NAMED:,} more (--json lists them all)"
        console.print(
            f"skipped {len(skipped):,} existing agent(s): {escape(shown)}"
            + (more if len(skipped) > _NAMED else "")
        )
    if forgotten:
        console.print(
            f"left out {len(forgotten)} forgotten agent(s) (their data keys are destroyed): "
            + escape(", ".join(forgotten))
        )
