"""``statekeeper retention apply``: a retention policy applied to every agent
(:mod:`statekeeper.governance.retention`), resumable with a progress file; it says how
far the change feed's floor rises over the events removed and names the projections
still behind it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._files import write_atomically
from ..errors import ConfigurationError
from ..namespaces import namespace_of
from . import render
from ._markup import escape, escape_id
from .app import (
    DbOption,
    JsonOption,
    handled,
    out_console,
    resolve_url,
    run,
    sqlite_file,
    stop_signal,
)
from .governance_data import _given_keys_open
from .retention_lines import UNSUPPORTED as _UNSUPPORTED
from .retention_lines import action_line as _action_line
from .retention_resume import Done, Problems, whole_run
from .stores import KeyFileOption, open_store

if TYPE_CHECKING:
    from ..governance.retention import RetentionAction, RetentionPolicy, RetentionReport
    from ..store import StateStore
    from ..store.feed_cursor import FeedCursor

__all__ = ["retention_app"]


# ----------------------------------------------------------------------- retention

retention_app = typer.Typer(
    name="retention",
    help="Apply retention policies: TTL, keep the last N events, thin snapshots, legal holds.",
    no_args_is_help=True,
)


def _retention_run(url: str, policy_text: str) -> dict[str, str]:
    """What a retention progress file is for, as digests (no path, host or password
    written to it): the store (a SQLite file by its absolute path, else the URL
    without its password) and the policy's text. A run resumed elsewhere would skip
    that store's agents up to the file's resume point."""
    import hashlib

    from ..backends.redact import mask_url
    from .app import sqlite_file

    file = sqlite_file(url)
    where = f"sqlite:{file.resolve()}" if file is not None else mask_url(url)

    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    return {"store": digest(where), "policy": digest(policy_text)}


@retention_app.command("apply")
@handled
def retention_apply(
    ctx: typer.Context,
    policy_file: Annotated[
        Path | None,
        typer.Option("--policy", metavar="FILE", help="Policy file (one rule or hold per line)."),
    ] = None,
    rules: Annotated[
        list[str] | None,
        typer.Option(
            "--rule",
            metavar="LINE",
            help="A policy line, e.g. 'acme ttl=30d keep_last=100' or 'hold acme/alice'"
            " (repeatable; added to --policy).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would go; change nothing.")
    ] = False,
    progress_file: Annotated[
        Path | None,
        typer.Option(
            "--progress-file",
            metavar="FILE",
            help="Record progress here so an interrupted run resumes where it stopped.",
        ),
    ] = None,
    read_model: Annotated[
        Path | None,
        typer.Option(
            "--read-model",
            metavar="FILE",
            help="A read-model file of `projections run`, whose projections are named when"
            " they have not read the events removed [default: next to a SQLite store,"
            " <store>.projections.db, when it exists].",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Apply a retention policy to every agent (resumable; --dry-run shows what would go).

    The change feed's floor rises over the events removed (not in a tenant admin's run): a
    subscriber behind gets FeedPositionCompacted; projections of --read-model behind are named.

    Exit code 1 when an action failed, else 4 when the principal of --as was refused one (access
    denied); each is listed with its reason, and the run goes on past it. A rule that governed no
    agent is warned of; exit code 1 when no rule governed any agent (and there is no '*' rule).
    """
    from ..governance.retention import RetentionPolicy
    from .files import check_output_file, json_tagged
    from .progress_lock import progress_held

    if progress_file is not None:
        check_output_file(
            progress_file, "retention progress file", json_tagged("statekeeper_retention")
        )
    text = ""
    source = "--rule"
    if policy_file is not None:
        parsed = RetentionPolicy.from_file(policy_file)  # errors name the file and line
        if not parsed.rules and not parsed.holds and not parsed.held_namespaces:
            raise ConfigurationError(f"the policy file {policy_file} sets no rule and no hold")
        text = policy_file.read_text(encoding="utf-8")
        source = str(policy_file)
    if rules:  # a bad one is named by its place among the --rule options: --rule:1
        RetentionPolicy.parse("\n".join(rules), "--rule")
        text += "\n" + "\n".join(rules)
    if not text.strip():
        raise ConfigurationError("retention apply needs --policy FILE or --rule LINE")
    policy = RetentionPolicy.parse(text, source if not rules else "policy")
    # (a dry run neither reads nor writes the progress file: no lock)
    with progress_held(None if dry_run else progress_file):  # (ProgressFileBusy)
        _apply(ctx, policy, text, dry_run, progress_file, read_model, db, key_file, json_out)


def _apply(
    ctx: typer.Context, policy: RetentionPolicy, text: str, dry_run: bool,
    progress_file: Path | None, read_model: Path | None, db: str | None,
    key_file: Path | None, json_out: bool,
) -> None:  # fmt: skip
    """``retention apply`` once its policy is read (holding its progress file)."""
    import json as jsonlib

    from ..governance.retention import RetentionReport, apply_retention
    from ..governance.retention_ahead import floor_note
    from .namespacing import current_namespace
    from .progress import bar

    url = resolve_url(ctx, db)
    if read_model is not None:  # (before anything is removed: not "no projections")
        _check_read_model(read_model)
    marks = _retention_run(url, text)
    after: str | None = None
    before = Problems()  # what the runs before the resume failed: never reported
    done_before: Done | None = Done()  # and what they did (None: an older file)
    if progress_file is not None and progress_file.exists() and not dry_run:
        try:
            state = jsonlib.loads(progress_file.read_text(encoding="utf-8"))
            after = str(state["statekeeper_retention"]["after"])
            before = Problems.of(state["statekeeper_retention"].get("problems"))
            done_before = Done.of(state["statekeeper_retention"].get("done"))
            recorded = str(state["statekeeper_retention"].get("namespace") or "")
            written_for = {k: state["statekeeper_retention"].get(k) for k in marks}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(
                f"{progress_file} is not a retention progress file statekeeper wrote"
            ) from None
        if recorded != (current_namespace() or ""):
            # its resume point is an id relative to the namespace it was written in
            raise ConfigurationError(
                f"{progress_file} records a run in namespace {recorded!r}, not"
                f" {current_namespace() or ''!r}: resume with the same --namespace"
            )
        for what, name in (("store", "another store"), ("policy", "another policy")):
            # (a file written before these were recorded names neither: resumed as it was)
            if written_for[what] is not None and written_for[what] != marks[what]:
                raise ConfigurationError(
                    f"{progress_file} records a run on {name}: resuming it would skip every"
                    f" agent up to {after!r} here; resume with the same --db and policy,"
                    " or delete the file to start over"
                )

    behind: dict[str, FeedCursor] = {}

    async def go() -> RetentionReport:
        async with open_store(url, key_file=key_file, readonly=dry_run) as store:
            await _given_keys_open(store)  # (a dry run opens no record: it would not say)
            total = await store.count_agents()
            with bar("retention", disable=json_out) as shown:
                task = shown.add_task("retention", total=total)

                def step(agent_id: str, scanned: int) -> None:
                    shown.advance(task)
                    if progress_file is not None and not dry_run:
                        since.count(so_far)
                        if done_since is not None:
                            done_since.count(so_far)
                        write_atomically(
                            progress_file,
                            jsonlib.dumps(
                                {
                                    "statekeeper_retention": {
                                        "after": agent_id,
                                        "namespace": current_namespace() or "",
                                        **marks,
                                        "problems": since.json(),
                                        **(
                                            {}
                                            if done_since is None
                                            else {"done": done_since.json()}
                                        ),
                                    }
                                }
                            ),
                            durable=False,  # a lost update only repeats an agent
                        )

                done = await apply_retention(
                    store, policy, dry_run=dry_run, after=after, progress=step, report=so_far
                )
            if done.feed_through is not None:
                feed = await store.backend.feed_id()
                behind.update(_projections_behind(url, read_model, store, feed, done.feed_through))
            return done

    so_far = RetentionReport()
    since = before.copy()  # and this run's, as it goes (written to the progress file)
    done_since = None if done_before is None else done_before.copy()
    try:
        report = run(go())
    except (KeyboardInterrupt, SystemExit) as exc:
        stop = stop_signal(exc)
        if stop is None:
            raise
        raise typer.Exit(
            _stopped(so_far, stop, dry_run=dry_run, progress_file=progress_file, json_out=json_out)
        ) from None
    if progress_file is not None and not dry_run:
        progress_file.unlink(missing_ok=True)  # finished: the next run starts over
    # a lost agent (AgentLost) is a problem found, as verify reports it: listed, exit 1
    code = _exit_code(report.actions, lost=bool(report.lost))
    if before.failed or before.lost:  # (an action failed before the resume)
        code = _exit_code([], lost=True)
    elif before.refused and not code:
        code = _exit_code([], lost=False, refused=True)
    from .exits import EXIT_NOT_FOUND, print_warning

    for pattern, agent in report.unmatched_rules.items():  # a typo, or an agent id: said
        print_warning(_unmatched_line(pattern, agent))
    if report.unlocked and not dry_run:
        print_warning(f"{_NO_RUN_LOCK}: {report.unlocked}")
    named = [r.namespace for r in policy.rules]
    if (
        report.scanned
        and not code
        and "*" not in named
        and len(named) == len(report.unmatched_rules)
    ):
        code = EXIT_NOT_FOUND  # no rule governed any agent: nothing was applied
    actions = [
        {
            "agent_id": a.agent_id,
            "action": a.kind,
            "outcome": a.outcome,
            "events_removed": a.events_removed,
            "snapshots_removed": a.snapshots_removed,
            "base_seq": a.base_seq,
            "reason": a.reason,
            # (keys_ttl's action alone: the others' shape unchanged)
            **({"keys_expired": a.keys_expired} if a.kind == "expire-keys" else {}),
        }
        for a in report.actions
    ]
    refused = sum(a.outcome == "refused" for a in report.actions)
    failed = sum(a.outcome == "failed" for a in report.actions)
    unsupported_n = sum(a.outcome == "unsupported" for a in report.actions)
    this = {"scanned": report.scanned, "held": report.held, "unsupported": unsupported_n}
    this |= {"failed": failed, "refused": refused, "lost": len(report.lost)}
    this["skipped"] = sum(a.outcome == "skipped" for a in report.actions)  # (not made)
    this["actions"] = len(report.actions) - unsupported_n - refused - failed - this["skipped"]
    total, note = whole_run(this, before, done_before) if after is not None else (this, "")
    if json_out:
        render.print_json(
            {
                "dry_run": dry_run,
                "scanned": report.scanned,
                "held": report.held,
                "holds_placed": report.holds_placed,
                "resumed_after": after,
                **({"whole_run": total} if after is not None else {}),  # (None: not known)
                **({"before_resume": before.json()} if before.any() else {}),
                "actions": actions,
                "lost": [{"agent_id": a, "reason": r} for a, r in report.lost.items()],
                "unmatched_rules": [
                    {"namespace": ns, "agent_id": agent or None}
                    for ns, agent in report.unmatched_rules.items()
                ],
                "feed_through": _cursor_json(report.feed_through),
                "projections_behind": [
                    {"name": name, "position": _cursor_json(at)} for name, at in behind.items()
                ],
            }
        )
        if code:
            raise typer.Exit(code)
        return
    console = out_console()
    if after is not None:
        console.print(f"resumed after {escape(repr(after))} (from {escape(str(progress_file))})")
    if before.any():
        console.print(f"[yellow]{escape(before.line())}[/]", soft_wrap=True)
    for pattern in report.holds_placed:  # the policy's hold lines, now the store's holds
        placed = "would place" if dry_run else "placed"
        console.print(f"{placed} a legal hold on {escape(pattern)!r} (a hold line of the policy)")
    unsupported: dict[tuple[str, str], int] = {}
    for a in report.actions:
        if a.outcome == "unsupported":  # nothing done, nothing to do: said once below
            unsupported[a.kind, a.reason] = unsupported.get((a.kind, a.reason), 0) + 1
            continue
        console.print(f"{escape_id(a.agent_id)}: {_action_line(a)}", soft_wrap=True)
    for (kind, reason), agents in unsupported.items():
        console.print(
            f"{_UNSUPPORTED.get(kind, kind)} not supported by this engine: {escape(reason)}"
            f" ({agents:,} agent(s))"
        )
    if report.lost:  # passed over, each named: their data is gone, nothing to apply
        from ..errors import AgentLost

        render.print_lost(console, [AgentLost("", a, r) for a, r in report.lost.items()])
    if report.feed_through is not None:
        raised = "would rise" if dry_run else "rose"
        console.print(
            f"the change feed's floor {raised} to {_cursor_json(report.feed_through)} (the"
            " events removed): a subscriber that has not read that far gets"
            " FeedPositionCompacted when it resumes"
        )
        for name, at in behind.items():
            console.print(
                f"[yellow]projection {escape(name)!r} is behind it (at"
                f" {_cursor_json(at)}): its read model misses the events removed[/]"
            )
    elif (left := floor_note(report.actions, dry_run)) is not None:  # a tenant admin's run
        console.print(f"[yellow]{escape(left)}[/]", soft_wrap=True)
    n = total or this  # (a resumed run: the whole operation's, when the file kept them)
    console.print(
        f"{n['scanned']:,} agent(s) scanned, {n['held']:,} on legal hold,"
        f" {n['actions']:,} action(s)"
        + (f", {n['skipped']:,} skipped (left to the next run)" if n["skipped"] else "")
        + (f", {n['failed']:,} failed" if n["failed"] else "")
        + (f", {n['refused']:,} refused (access denied)" if n["refused"] else "")
        + (f", {n['unsupported']:,} unsupported" if n["unsupported"] else "")
        + (f", {n['lost']:,} lost" if n["lost"] else "")
        + note
        + (" (dry run: nothing changed)" if dry_run else "")
    )
    if code:
        raise typer.Exit(code)  # problems found: listed above (the run goes on past them)


def _stopped(
    report: RetentionReport,
    signum: int,
    *,
    dry_run: bool,
    progress_file: Path | None,
    json_out: bool,
) -> int:
    """Say how far a retention run stopped by ``signum`` got (its history removed from
    agents is gone: the user must know, and how to finish); its exit code (130, 143)."""
    import shlex
    import signal

    from . import exits

    word = "interrupted" if signum == signal.SIGINT else "terminated"
    done = [a for a in report.actions if a.outcome == "done"]
    agents = len({a.agent_id for a in done})
    events = sum(a.events_removed for a in done)
    snapshots = sum(a.snapshots_removed for a in done)
    if json_out:
        render.print_json(
            {
                "dry_run": dry_run,
                "stopped": word,
                "scanned": report.scanned,
                "agents_changed": agents,
                "events_removed": events,
                "snapshots_removed": snapshots,
                "last_agent": report.last_agent,
                "progress_file": None if progress_file is None else str(progress_file),
            }
        )
    if dry_run:
        exits.print_error(f"{word} after {report.scanned:,} agent(s) (dry run: nothing changed)")
    else:
        if progress_file is not None:
            again = (
                f"run the same command again (--progress-file {shlex.quote(str(progress_file))})"
                " to resume after the last agent finished"
            )
        else:
            again = (
                "run it again to finish (the agents done are scanned again: nothing more"
                " to remove there; add --progress-file FILE to resume where a run stops)"
            )
        exits.print_error(
            f"{word} after {report.scanned:,} agent(s) scanned: history already removed from"
            f" {agents:,} agent(s) ({events:,} event(s), {snapshots:,} snapshot(s)); {again}"
        )
    return 128 + signum


def _cursor_json(cursor: FeedCursor | None) -> int | str | None:
    """A cursor as the CLI shows it: the position on a store with one feed."""
    if cursor is None:
        return None
    return cursor.positions[0] if len(cursor.positions) == 1 else str(cursor)


def _check_read_model(path: Path) -> None:
    """A ``--read-model`` given is a read-model file (an ``sk_projections`` table), else
    :class:`~statekeeper.errors.ConfigurationError`: a typo or another file read as "no
    projections" would hide the projections the run leaves behind."""
    from ..backends.sqlite.files import describe
    from .projections import looked_at

    model, info = looked_at(path)
    if model:
        return
    raise ConfigurationError(
        f"--read-model {path}: it {describe(info)}, not a read-model file of"
        " `statekeeper projections run`; nothing was removed"
    )


def _projections_behind(
    url: str, given: Path | None, store: StateStore, feed: str | None, through: FeedCursor
) -> dict[str, FeedCursor]:
    """The projections of the read-model file (``--read-model``, else the one next to a
    SQLite store) that have not read up to ``through``, with where they are; of the
    default file, not another store's (``x.db2`` beside ``x.db``: this store's feed is
    ``feed``)."""
    from ..feed.feedcheck import store_mark
    from ..feed.stored import projection_cursors
    from ..store.feed import feed_shards
    from ..store.feed_retention import behind

    path = given
    if path is None:
        store_file = sqlite_file(url)
        if store_file is None:
            return {}
        path = store_file.with_name(store_file.stem + ".projections.db")
    mark = store_mark(store.backend) if given is None else None
    cursors = projection_cursors(path, feed_shards(store.backend), feed=feed, store=mark)
    return {name: cursors[name] for name in behind(cursors, through)}


_NO_RUN_LOCK = (
    "this run held no run lock: another retention run on the store at the same time was"
    " not refused (each change was still checked against what its plan read)"
)


def _exit_code(actions: list[RetentionAction], *, lost: bool, refused: bool = False) -> int:
    """1 when an action failed or an agent was lost, else 4 (access denied) when one
    was refused, else 0."""
    from .exits import EXIT_DENIED, EXIT_NOT_FOUND

    if lost or any(a.outcome == "failed" for a in actions):
        return EXIT_NOT_FOUND
    return EXIT_DENIED if refused or any(a.outcome == "refused" for a in actions) else 0


def _unmatched_line(pattern: str, agent: str) -> str:
    """The warning for a rule that governed no agent: ``agent`` (its full id, or "") is
    the agent the pattern names, where a namespace belongs."""
    said = f"rule {pattern!r} governed no agent: no agent is in namespace {pattern!r}"
    if not agent:
        return said
    ns = namespace_of(agent)
    use = (
        f"write the rule for its namespace {ns!r}"
        if ns
        else "use a '*' rule (the root namespace's)"
    )
    what = "is an agent" if agent == pattern else f"names the agent {agent!r}"
    return (
        f"{said}; {pattern!r} {what}, and rules name namespaces: hold it ('hold {agent}') or {use}"
    )


@retention_app.command("adopt-compactions")
@handled
def retention_adopt(
    ctx: typer.Context,
    agents: Annotated[
        list[str] | None,
        typer.Argument(metavar="[AGENT]...", help="Only these agents [default: every one]."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be adopted; change nothing.")
    ] = False,
    unrecorded: Annotated[
        bool,
        typer.Option(
            "--unrecorded",
            help="Adopt too the compactions the store's audit log does not record (a log"
            " started after them): on your word.",
        ),
    ] = False,
    keyless: Annotated[
        bool,
        typer.Option("--keyless", help="Run on a store whose records have no key."),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Mark the streams an earlier version's retention compacted (keep_last) as
    compactions, after checking what can be checked of each (idempotent: run it again
    to resume; --dry-run shows what would be adopted).

    Until then verify reports their history as deleted and history and export raise
    IntegrityError. Each adoption is recorded in the audit log of a store that keeps
    one. Exit code 1 when an agent was refused (listed with the reason: its history
    may have been deleted by hand).
    """
    from ..governance.adoption import AdoptionReport, adopt_compactions
    from .exits import EXIT_NOT_FOUND

    url = resolve_url(ctx, db)

    async def go() -> AdoptionReport:
        # (the store opened first: a path that is not a store says so before a missing
        # key is asked for; adopt_compactions refuses a keyed run without one)
        async with open_store(url, key_file=key_file, readonly=dry_run) as store:
            await _given_keys_open(store)  # (a dry run of uncompacted agents opens no record)
            return await adopt_compactions(
                store, agents or (), dry_run=dry_run, unrecorded=unrecorded, keyless=keyless
            )

    report = run(go())
    refused = report.refused
    if json_out:
        render.print_json(
            {
                "dry_run": dry_run,
                "scanned": report.scanned,
                "marked_already": report.marked_already,
                "agents": [
                    {
                        "agent_id": a.agent_id,
                        "base_seq": a.base_seq,
                        "outcome": a.outcome,
                        "reason": a.reason,
                    }
                    for a in report.adoptions
                ],
            }
        )
    else:
        console = out_console()
        for a in report.adoptions:
            if a.outcome == "refused":
                line = f"not adopted (base seq {a.base_seq}): {escape(a.reason)}"
            else:
                verb = "would adopt" if a.outcome == "dry-run" else "adopted"
                line = f"{verb} the compaction to seq {a.base_seq}"
            console.print(f"{escape_id(a.agent_id)}: {line}", soft_wrap=True)
        adopted = len(report.adoptions) - len(refused)
        console.print(
            f"{report.scanned:,} agent(s) scanned, {adopted:,}"
            f" {'to adopt' if dry_run else 'adopted'}, {len(refused):,} refused,"
            f" {report.marked_already:,} marked already"
            + (" (dry run: nothing changed)" if dry_run else "")
        )
    if refused:
        raise typer.Exit(EXIT_NOT_FOUND)
