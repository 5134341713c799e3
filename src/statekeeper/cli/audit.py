"""``statekeeper audit``: list, filter and verify the audit log of a store.

``statekeeper audit`` prints the entries (``--agent``, ``--principal``, ``--since``,
``--op`` filter them; ``--json`` prints JSON Lines for a SIEM);
``statekeeper audit verify`` checks every entry, the chain and the authenticated head,
and with ``--witness FILE`` that the log was not rolled back since the last check
(the file then holds the new head). Both need the key the log is sealed with (the
store's: ``--key-file`` or the environment; a store that keeps no audit log has
nothing to show without one). Under ``--as``, reading the audit log
needs ``admin`` on every namespace (``**``).

**With** ``--namespace NS``, ``statekeeper audit`` lists the entries of the agents of
``NS`` and below it (ids relative to it, ``--agent`` too), and the namespace-wide
entries made in it (a backup, restore, retention run or listing of ``NS``, refusals
included: their ``detail`` names the namespace); under ``--as`` that needs ``admin``
on ``NS`` and every namespace below it (``NS/**``), not on ``**``. ``statekeeper audit
verify`` refuses ``--namespace``: the log is one hash chain for the whole store, and
checking it means reading every entry of every namespace (a store admin's job).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import AgentForgotten, ConfigurationError
from . import render
from ._markup import escape, escape_id
from .app import DbOption, JsonOption, app, handled, out_console, resolve_url, run
from .files import check_output_file
from .stores import KeyFileOption, open_store

if TYPE_CHECKING:
    from ..governance.audit import AuditEntry, AuditLog
    from ..store import StateStore

__all__ = ["audit_app"]

audit_app = typer.Typer(
    name="audit",
    help="List and verify the audit log: who did what to which agent, and when.",
    invoke_without_command=True,
)


#: how far before ``--since`` entries are listed: an entry's ``--json`` time is ISO
#: 8601 to the microsecond, rounded (half a microsecond either way, and an epoch float's
#: own step, ~0.24 µs today): given back as ``--since``, it lists that entry
SINCE_SLACK = 1e-6


def _since(value: str | None) -> float | None:
    from .times import parse_time as _parse_time  # loaded on use: keeps ``audit --help`` light

    return None if value is None else _parse_time(value, "--since") - SINCE_SLACK


async def _log(store: StateStore) -> AuditLog | None:
    """The store's audit log, once the principal (if any) may read it; None when the
    store keeps none and no key was given (nothing to read, nothing to check)."""
    from ..governance.audit import AUDIT_ID, KEPT_MARKER, AuditLog
    from ..store.governed import governance_of

    governance = governance_of(store)
    namespace = _namespace(store)
    if governance is not None and namespace:
        # the entries of one namespace: admin on all of it is enough
        await governance.require_namespace(namespace, "admin", "audit")
    elif governance is not None:
        await governance.require(None, "admin", "audit")
    keyring = store.codec.keyring
    if keyring is None:
        if await store.backend.head(AUDIT_ID) == 0 and not await store.backend.read_marker(
            KEPT_MARKER
        ):
            return None  # (a store marked as keeping a log whose log is gone: checked)
        raise ConfigurationError(
            "the audit log is sealed with the store's key: pass --key-file or set "
            "$STATEKEEPER_KEY_FILE / $STATEKEEPER_KEYS"
        )
    # a tenant's database role appends entries it may not read (PostgreSQL row
    # security): refused (exit 4), not listed empty or verified as truncated
    await AuditLog(store.backend, keyring).check_readable()
    if await store.backend.head(AUDIT_ID) == 0:
        # an empty log proves nothing about the key: check it opens the store's records
        # (a wrong key is an error, not "no entries"), on the first agent that is not
        # forgotten (a destroyed data key says nothing about the key given)
        after: str | None = None
        while page := await store.list_agents(after=after, limit=100):
            for info in page:
                try:
                    await store.get(info.agent_id)
                except AgentForgotten:
                    continue
                return AuditLog(store.backend, keyring)
            after = page[-1].agent_id
    return AuditLog(store.backend, keyring)


def _namespace(store: StateStore) -> str:
    namespace = getattr(store, "namespace", "")
    return namespace if isinstance(namespace, str) else ""


def _in_namespace(entry: AuditEntry, namespace: str) -> AuditEntry | None:
    """``entry`` as a listing in ``namespace`` shows it (its agent id relative to the
    namespace), or None when it is not about the namespace: an agent outside it, or a
    store-wide entry whose ``detail`` names no namespace inside it."""
    import dataclasses

    prefix = namespace + "/"
    if entry.agent_id is not None:
        if not entry.agent_id.startswith(prefix):
            return None
        return dataclasses.replace(entry, agent_id=entry.agent_id[len(prefix) :])
    where = entry.detail.get("namespace")
    if isinstance(where, str) and (where == namespace or where.startswith(prefix)):
        return entry
    return None


async def _check_operation(log: AuditLog | None, op: str) -> None:
    """Refuse ``--op`` naming no operation statekeeper records (a typo would otherwise
    list "no audit entries"), unless the log holds entries of it (a tool's own name)."""
    from ..governance.audit import KNOWN_OPERATIONS

    if op in KNOWN_OPERATIONS:
        return
    if log is not None:
        async for _ in log.entries(operation=op):
            return
    raise typer.BadParameter(
        f"{op!r} is not an operation the audit log records; one of: "
        + ", ".join(sorted(KNOWN_OPERATIONS)),
        param_hint="'--op'",
    )


def _line(entry: AuditEntry) -> str:
    seqs = (
        f"{entry.first_seq}" if entry.first_seq == entry.last_seq else
        f"{entry.first_seq}..{entry.last_seq}"
    ) if entry.first_seq is not None else "-"  # fmt: skip
    return (
        f"{entry.seq:>6}  {render.local_time(entry.time)}  {escape(entry.principal or '-'):<12} "
        f"{entry.operation:<10} {escape(entry.outcome):<8} "
        f"{escape_id(entry.agent_id or '-')} {seqs}"
    )


@audit_app.callback()
@handled
def audit(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="AGENT",
            help="Only entries of this agent (or of a namespace: 'acme/').",
            show_default=False,
        ),
    ] = None,
    principal: Annotated[
        str | None,
        typer.Option(
            "--principal",
            metavar="NAME",
            help="Only entries of this principal.",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="TIME",
            help="Only entries at or after TIME (ISO 8601 or epoch seconds; to its microsecond).",
            show_default=False,
        ),
    ] = None,
    op: Annotated[
        str | None,
        typer.Option(
            "--op",
            metavar="OPERATION",
            help="Only entries of this operation (save, delete, lease, policy...).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON Lines (one entry per line).")
    ] = False,
) -> None:
    """List the audit log: who did what to which agent, and when (oldest first)."""
    if ctx.invoked_subcommand is not None:
        return
    url = resolve_url(ctx, db)
    start = _since(since)

    async def go() -> int:
        count = 0
        async with open_store(url, key_file=key_file) as store:
            log = await _log(store)
            if op is not None:
                await _check_operation(log, op)
            if log is None:
                return 0
            console = out_console()
            namespace = _namespace(store)
            wanted = agent
            if namespace and agent is not None:
                # relative to the namespace, as every id under --namespace is
                wanted = f"{namespace}/{agent}"
            async for found in log.entries(
                agent=wanted, principal=principal, since=start, operation=op
            ):
                entry = _in_namespace(found, namespace) if namespace else found
                if entry is None:
                    continue
                count += 1
                if json_out:
                    line = {**entry.to_json(), "time": render.iso(entry.time)}
                    render.print_json([line], lines=True)
                else:
                    console.print(_line(entry), soft_wrap=True)
        return count

    count = run(go())
    if not json_out and count == 0:
        out_console().print("no audit entries")


@audit_app.command("verify")
@handled
def audit_verify(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    witness: Annotated[
        Path | None,
        typer.Option(
            "--witness",
            metavar="FILE",
            help="Check the log still holds the head kept in FILE (rolled back, "
            "truncated or rewritten since?), then keep the new head there.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Check the audit log: every entry authenticated and chained, the head, and
    (--witness) no rollback. Exit code 1 when any problem is found."""
    from ..governance.audit import AuditReport, read_witness, write_witness

    url = resolve_url(ctx, db)
    seen = read_witness(witness) if witness is not None else None
    if witness is not None:  # its folder, before the log is read (read_witness: its content)
        check_output_file(witness, "audit head file", lambda _: True)

    async def go() -> AuditReport:
        async with open_store(url, key_file=key_file) as store:
            log = await _log(store)
            return await log.verify(seen) if log is not None else AuditReport()

    report = run(go())
    if witness is not None and report.ok and report.head is not None:
        write_witness(witness, report.head)
    if json_out:
        render.print_json(
            {
                "ok": report.ok,
                "entries": report.entries,
                "head": report.head.seq if report.head is not None else 0,
                "problems": report.problems,
                "unapplied": report.unapplied,
                "unchecked": report.unchecked,
            }
        )
    else:
        console = out_console()
        for problem in report.problems:
            console.print(f"[red]problem:[/] {escape(problem)}", soft_wrap=True)
        for line in report.unapplied:  # the log is intact; the store lacks a change
            console.print(f"[yellow]not applied:[/] {escape(line)}", soft_wrap=True)
        if report.unchecked:  # recorded changes verify had nothing to compare with
            counts = ", ".join(f"{op} {n}" for op, n in report.unchecked.items())
            console.print(f"not checkable against the store: {counts}", soft_wrap=True)
        verdict = "[green]ok[/]" if report.ok else "[red]FAILED[/]"
        entries = "1 entry" if report.entries == 1 else f"{report.entries} entries"
        console.print(f"audit log: {entries}, {verdict}")
        hint = render.key_hint_for(report.problems)  # the key given, not a damaged log
        if hint is not None:
            console.print(f"[yellow]{escape(hint)}[/]")
    if not report.ok:
        raise typer.Exit(1)


app.add_typer(audit_app)
