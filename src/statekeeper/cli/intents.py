"""``statekeeper feed-intents``: the change feed's pending delete intents, and settling those
no process can prove dead (:mod:`statekeeper.store.feed_intent_repair`).

Exit codes: 0 — listed, or every intent named settled; 1 — ``--settle`` refused one
(its owner runs on this host, or an intact agent's written less than an hour ago:
``--force``; a forget's with no key vault) or the
confirmation was declined, or nothing matched; 2 — usage and store errors.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._markup import escape, escape_id
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

if TYPE_CHECKING:
    from ..store.feed_intent_repair import FeedIntent, SettledIntent
    from ..store.verification import Problem

__all__ = ["intents_command", "naming_the_store"]


@app.command("feed-intents")
@handled
def intents_command(
    ctx: typer.Context,
    agent_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Settle the intents of these agents.", show_default=False),
    ] = None,
    settle: Annotated[
        bool,
        typer.Option("--settle", help="Settle the intents named (agents or --older-than)."),
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="With --settle: the intents written longer ago than this (15m, 12h, 30d).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Settle an intent whose owner runs on this host too, and an intact agent's"
            " intent written less than an hour ago named by its agent alone.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the change feed's pending delete intents; --settle ends those no process can.

    An intent whose agent is deleted gets its tombstone (once); one whose agent is
    intact is dropped (its delete never happened). Exit 1 when --settle refused one or
    matched none, or the confirmation was declined.
    """
    from .langgraph import parse_duration

    url = resolve_url(ctx, db)
    if not settle:
        if agent_ids or older_than is not None or force:
            raise typer.BadParameter("agents, --older-than and --force go with --settle")

        async def listing() -> list[FeedIntent]:
            from ..governance.keycheck import check_keys

            async with open_store(url, key_file=key_file) as store:
                found = await store.feed_intents()
                if not found:  # "no feed intent pending" only from keys that open the store
                    await check_keys(store)
                return found

        found = run(listing())
        if json_out:
            from . import render

            render.print_json([_intent_json(i) for i in found])
        else:
            _print_intents(found)
        return
    if not agent_ids and older_than is None:
        raise typer.BadParameter("--settle needs agent ids or --older-than")
    age = None if older_than is None else parse_duration(older_than, "--older-than")
    if not yes and not typer.confirm(
        "Settle the feed intents named (a deleted agent's tombstone is written; an intact"
        " agent's intent is dropped)?"
    ):
        err_console().print("nothing settled")
        raise typer.Exit(1)

    async def settling() -> list[SettledIntent]:
        async with open_store(url, key_file=key_file, readonly=False) as store:
            return await store.settle_feed_intents(agent_ids or None, older_than=age, force=force)

    done = run(settling())
    if json_out:
        from . import render

        render.print_json(
            [{**_intent_json(s.intent), "outcome": s.outcome, "reason": s.reason} for s in done]
        )
    else:
        console = out_console()
        for s in done:
            what = {"tombstone": "tombstone written", "dropped": "intent dropped"}
            line = f"{escape_id(s.intent.agent_id)} (seq {s.intent.head}): "
            line += what.get(s.outcome, f"refused — {escape(s.reason)}")
            console.print(line)
        if not done:
            console.print("no intent matched: nothing settled")
    if not done or any(s.outcome == "refused" for s in done):
        raise typer.Exit(1)


def _intent_json(intent: FeedIntent) -> dict[str, Any]:
    from .render import iso

    return {
        "agent_id": intent.agent_id,
        "seq": intent.head,
        "kind": intent.kind,
        "owner": intent.owner,
        "written": iso(intent.written),
        "age": round(intent.age(), 3),
        "state": intent.state,
        "owner_is": intent.where,
        "why": intent.why,
    }


def _print_intents(found: list[FeedIntent]) -> None:
    from rich.table import Table

    console = out_console()
    if not found:
        console.print("no feed intent pending")
        return
    table = Table(title="Feed intents")
    for column in ("agent", "seq", "kind", "owner", "age", "kept because"):
        table.add_column(column, justify="right" if column == "seq" else "left")
    now = time.time()
    for i in found:
        owner = i.owner or {}
        who = f"{owner.get('host')} pid {owner.get('pid')}" if owner else "-"
        table.add_row(
            escape_id(i.agent_id),
            str(i.head),
            i.kind,
            escape(who),
            _age(i.age(now)),
            escape(i.why),
        )
    console.print(table)


def _age(seconds: float) -> str:
    """``seconds`` in its largest whole unit, rounded down: ``3d``, ``5h``, ``12m``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def naming_the_store(problems: Sequence[Problem], url: str) -> list[Problem]:
    """``problems`` with the ``feed-intents`` command a feed problem suggests naming the
    store ``url``. Without it, the command copied from ``verify --db ...`` settled
    nothing in the default store, or another store's intents. A URL with a secret is
    named as ``"$STATEKEEPER_URL"``, said to be set to it: its secret is never printed
    (was: the URL with its password masked, ``***``, a command that could not run)."""
    from ..backends.redact import mask_url
    from ..store.feed_intent_repair import COMMAND

    secret = mask_url(url) != url
    where = '"$STATEKEEPER_URL"' if secret else shlex.quote(url)
    named = f"{COMMAND} --db {where} "
    told = " ($STATEKEEPER_URL: this store's URL, not printed here: it has a password)"

    def suggested(reason: str) -> str:
        said = reason.replace(COMMAND + " ", named)
        return said + told if secret and said != reason else said

    return [
        dataclasses.replace(p, reason=suggested(p.reason)) if p.kind == "feed" else p
        for p in problems
    ]
