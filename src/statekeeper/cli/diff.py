"""``statekeeper diff``: what changed in an agent's state between two seqs, or how two
agents' states differ, as a coloured diff of the JSON documents.

* ``diff AGENT [--to SEQ]`` — what event ``--to`` (default the head) changed: ``--from``
  defaults to ``--to`` minus 1, and seq 0 is the agent before it existed (``null``), so
  the diff of seq 1 shows the creation;
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
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class _Side:
    """One side of the diff: an agent at a seq, or (seq 0) before it existed."""

    agent_id: str
    seq: int
    document: dict[str, Any] | None

    @property
    def label(self) -> str:
        tail = "" if self.document is not None else " (did not exist)"
        return f"{self.agent_id}@{self.seq}{tail}"

    def json(self) -> dict[str, Any]:
        doc = render.shown(self.document) or {"state": None, "data": None}
        return {"agent_id": self.agent_id, "seq": self.seq, **doc}

    def lines(self) -> list[str]:
        if self.document is None:
            return []
        shown = render.shown(self.document)  # typed values tagged: Decimal("1.10") is not "1.10"
        return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _side(snap: Snapshot) -> _Side:
    return _Side(snap.agent_id, snap.seq, {"state": snap.fsm_state, "data": snap.data})


def _ops(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[Any]:
    from .. import patch

    if a is None and b is not None:  # the creation: the whole document is added
        return [{"op": "add", "path": "", "value": b}]
    return patch.diff(a, b)


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
            help=(
                "The first side's seq [default for one agent: --to minus 1, where 0 is "
                "before the agent existed; for two agents: AGENT's head]."
            ),
            show_default=False,
        ),
    ] = None,
    to_seq: Annotated[
        int | None,
        typer.Option(
            "--to",
            metavar="SEQ",
            min=1,
            help="The second side's seq [default: the head (of OTHER for two agents)].",
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
    url = resolve_url(ctx, db)

    async def go() -> tuple[_Side, _Side]:
        async with open_store(url, key_file=key_file) as store:
            if other is not None:
                left = await _at(store, agent, from_seq)
                return _side(left), _side(await _at(store, other, to_seq))
            head = await store.head(agent)
            if head == 0:
                raise AgentNotFound(agent)
            right = await _at(store, agent, to_seq if to_seq is not None else head)
            frm = from_seq if from_seq is not None else right.seq - 1
            if frm == 0:  # the event --to is the creation: compare with nothing
                return _Side(agent, 0, None), _side(right)
            return _side(await _at(store, agent, frm)), _side(right)

    left, right = run(go())
    ops = _ops(left.document, right.document)
    if json_out:
        render.print_json(
            {"from": left.json(), "to": right.json(), "same": not ops, "ops": render.shown(ops)}
        )
    else:
        console = out_console()
        lines = list(
            difflib.unified_diff(
                left.lines(), right.lines(), left.label, right.label, n=context, lineterm=""
            )
        )
        if not lines:
            console.print(f"no difference: {escape(left.label)} = {escape(right.label)}")
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
