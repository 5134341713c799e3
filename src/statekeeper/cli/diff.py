"""``statekeeper diff``: what changed in an agent's state between two seqs, or how two
agents' states differ, as a coloured diff of the JSON documents.

* ``diff AGENT`` — the last event's change (``--from`` head-1 ``--to`` head);
* ``diff AGENT --from SEQ [--to SEQ]`` — between two points of one agent's stream;
* ``diff AGENT OTHER [--from SEQ] [--to SEQ]`` — AGENT (at ``--from``, default its
  head) against OTHER (at ``--to``, default its head).

The compared document is ``{"state": <FSM state>, "data": <data>}``. ``--json`` prints
both sides and the JSON Patch (RFC 6902) that turns the first into the second. The exit
code is 0 whether or not they differ (like ``git diff``); ``--exit-code`` makes it 1
when they differ.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import AgentNotFound, ConfigurationError
from . import render
from ._markup import escape
from .app import (
    DbOption,
    JsonOption,
    KeyFileOption,
    app,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)

if TYPE_CHECKING:
    from ..records import Snapshot
    from ..store import StateStore

__all__ = ["diff"]


async def _at(store: StateStore, agent_id: str, seq: int | None) -> Snapshot:
    head = await store.head(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    if seq is not None and not 1 <= seq <= head:
        raise ConfigurationError(f"seq {seq} is outside 1..{head} for agent {agent_id!r}")
    return await store.load(agent_id, at_seq=seq if seq is not None else head)


def _document(snap: Snapshot) -> dict[str, Any]:
    return {"state": snap.fsm_state, "data": snap.data}


def _label(snap: Snapshot) -> str:
    return f"{snap.agent_id}@{snap.seq}"


@app.command()
@handled
def diff(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="The agent.", show_default=False)],
    other: Annotated[
        str | None,
        typer.Argument(help="A second agent to compare with.", show_default=False),
    ] = None,
    from_seq: Annotated[
        int | None,
        typer.Option(
            "--from",
            metavar="SEQ",
            min=1,
            help="The first side's seq [default: head-1 for one agent, else the head].",
            show_default=False,
        ),
    ] = None,
    to_seq: Annotated[
        int | None,
        typer.Option(
            "--to",
            metavar="SEQ",
            min=1,
            help="The second side's seq [default: the head].",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        int, typer.Option("--context", "-U", metavar="N", min=0, help="Lines of context.")
    ] = 3,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit with 1 when the sides differ.")
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show how an agent's state changed between two seqs, or how two agents differ."""
    from .. import patch

    url = resolve_url(ctx, db)

    async def go() -> tuple[Snapshot, Snapshot]:
        async with open_store(url, key_file=key_file) as store:
            if other is not None:
                return await _at(store, agent, from_seq), await _at(store, other, to_seq)
            head = await store.head(agent)
            if head == 0:
                raise AgentNotFound(agent)
            to = to_seq if to_seq is not None else head
            frm = from_seq if from_seq is not None else max(1, to - 1)
            return await _at(store, agent, frm), await _at(store, agent, to)

    left, right = run(go())
    a, b = _document(left), _document(right)
    ops = patch.diff(a, b)
    if json_out:
        render.print_json(
            {
                "from": {"agent_id": left.agent_id, "seq": left.seq, **a},
                "to": {"agent_id": right.agent_id, "seq": right.seq, **b},
                "same": not ops,
                "ops": ops,
            }
        )
    else:
        console = out_console()
        a_lines = json.dumps(a, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
        b_lines = json.dumps(b, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
        lines = list(
            difflib.unified_diff(
                a_lines, b_lines, _label(left), _label(right), n=context, lineterm=""
            )
        )
        if not lines:
            console.print(f"no difference: {escape(_label(left))} = {escape(_label(right))}")
        for line in lines:
            text = escape(line)
            if line.startswith(("---", "+++")):
                console.print(f"[bold]{text}[/]", soft_wrap=True)
            elif line.startswith("@@"):
                console.print(f"[cyan]{text}[/]", soft_wrap=True)
            elif line.startswith("-"):
                console.print(f"[red]{text}[/]", soft_wrap=True)
            elif line.startswith("+"):
                console.print(f"[green]{text}[/]", soft_wrap=True)
            else:
                console.print(text, soft_wrap=True)
    if exit_code and ops:
        raise typer.Exit(1)
