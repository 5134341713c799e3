"""``statekeeper tail``: the newest events of an agent or of the whole store, and with
``-f`` the new ones as they are committed.

Following polls the store every ``--interval`` seconds (default 0.5): for one agent it
reads the events after the last one printed (from the first again when the agent was
deleted and written again); for the whole store it pages through
the agent list and reads the new events of every agent whose head moved (a cost that
grows with the number of agents). Events are read verified, as by ``history``. Stop
with Ctrl-C (exit code 0). The whole store's tail passes over the agents ``forget``
crypto-shredded (their records no longer open) and names them on stderr, as ``export``
does; the tail of one such agent is refused (``AgentForgotten``), as ``show`` is.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import AgentForgotten, AgentNotFound
from . import render
from ._markup import escape, escape_id
from .app import (
    DbOption,
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
    from rich.console import Console

    from ..records import Event
    from ..store import StateStore

__all__ = ["newest_events", "tail"]


def event_line(ev: Event, *, with_agent: bool) -> str:
    """One event as one line of markup: time, [agent,] seq, event, from → to, tool."""
    meta = ev.info.get("metadata")
    tool = meta.get("tool") if isinstance(meta, dict) else None
    is_transition = ev.type == "transition"
    name = ev.info.get("event") if is_transition else None
    frm = ev.info.get("from") if is_transition else None
    to = ev.info.get("to") if is_transition else ev.fsm_state
    parts = [f"[dim]{render.local_time(ev.timestamp, date=False)}[/]"]
    if with_agent:
        parts.append(f"[bold]{escape_id(ev.agent_id)}[/]")
    parts.append(f"#{ev.seq}")
    parts.append(escape(str(name)) if name else f"[dim]{escape(ev.type)}[/]")
    moved = render.transition_text(frm, to)
    if moved:
        parts.append(moved)
    if tool:
        parts.append(f"[magenta]{escape(str(tool))}[/]")
    return "  ".join(parts)


class _Printer:
    def __init__(self, console: Console, json_out: bool, with_agent: bool) -> None:
        self.console = console
        self.json_out = json_out
        self.with_agent = with_agent

    def __call__(self, ev: Event) -> None:
        if self.json_out:
            render.print_json([render.event_json(ev)], lines=True)
        else:
            self.console.print(event_line(ev, with_agent=self.with_agent))
            sys.stdout.flush()


async def _last_events(store: StateStore, agent_id: str, head: int, n: int) -> list[Event]:
    if n == 0 or head == 0:
        return []
    from ..store.kept import kept_history

    return await kept_history(store, agent_id, max(0, head - n), head)


async def newest_events(
    store: StateStore,
    heads: dict[str, tuple[int, float]],
    lines: int,
    forgotten: list[str],
    advance: Any = None,
) -> list[Event]:
    """The ``lines`` newest events of the agents of ``heads``, oldest first (by time,
    then agent id and seq). Only those are kept as the agents are read: the whole store
    held every agent's last ``lines`` events at once (10 per agent, 10^6 agents: ten
    million events in memory). A crypto-shredded agent is appended to ``forgotten``."""
    import heapq
    import itertools

    if not lines:
        return []
    kept: list[tuple[tuple[float, str, int], int, Event]] = []  # a min-heap of the newest
    order = itertools.count()
    for agent_id, (head, _) in heads.items():
        try:
            events = await _last_events(store, agent_id, head, lines)
        except AgentForgotten:  # crypto-shredded: unreadable by design
            forgotten.append(agent_id)
            events = []
        for ev in events:
            item = ((ev.timestamp, ev.agent_id, ev.seq), next(order), ev)
            if len(kept) < lines:
                heapq.heappush(kept, item)
            elif item[0] > kept[0][0]:
                heapq.heapreplace(kept, item)
        if advance is not None:
            advance()
    return [ev for _, _, ev in sorted(kept)]


async def _heads(store: StateStore) -> dict[str, tuple[int, float]]:
    """Each agent's head seq and creation time (a new one: deleted and written again)."""
    return {i.agent_id: (i.head_seq, i.created_at) async for i in store.iter_agents()}


async def _mark(store: StateStore, agent_id: str, seq: int) -> bytes | None:
    """The stored checksum of the agent's record at ``seq`` (None: there is none)."""
    from ..store.namespaced import stored_id

    raw = await store.backend.read(stored_id(store, agent_id), after_seq=seq - 1, to_seq=seq)
    return raw[0].checksum if raw else None


async def _follow_agent(
    store: StateStore,
    agent_id: str,
    start: tuple[int, bytes | None],
    show: _Printer,
    interval: float,
) -> None:
    """From ``start``: the last seq printed and the checksum of its record then."""
    import asyncio

    from ..store.kept import kept_history

    seen, mark = start
    while True:
        if seen:
            now = await _mark(store, agent_id, seen)  # None: trimmed by retention, or gone
            if (now is not None and now != mark) or await store.head(agent_id) < seen:
                seen = 0  # deleted and written again: the new stream from its start
        for ev in await kept_history(store, agent_id, seen):  # (past what retention trimmed)
            show(ev)
            seen = ev.seq
        mark = await _mark(store, agent_id, seen) if seen else None
        await asyncio.sleep(interval)


def _left_out(forgotten: list[str]) -> None:
    """Name the forgotten agents passed over, on stderr (stdout carries the events)."""
    if forgotten:
        err_console().print(
            f"left out {len(forgotten)} forgotten agent(s) (their data keys are destroyed): "
            + escape(", ".join(forgotten))
        )


async def _follow_store(
    store: StateStore,
    seen: dict[str, tuple[int, float]],
    show: _Printer,
    interval: float,
    gone: set[str],
) -> None:
    import asyncio

    from ..store.kept import kept_history

    while True:
        heads = await _heads(store)
        for agent_id, (head, created) in heads.items():
            done, since = seen.get(agent_id, (0, created))
            if head < done or created != since:  # deleted and re-created: start over
                done = 0
            if head > done and agent_id not in gone:
                try:
                    events = await kept_history(store, agent_id, done, head)
                except AgentForgotten:  # forgotten while followed: passed over from now on
                    gone.add(agent_id)
                    _left_out([agent_id])
                    events = []
                for ev in events:
                    show(ev)
            seen[agent_id] = head, created
        await asyncio.sleep(interval)


@app.command()
@handled
def tail(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Argument(help="The agent [default: every agent in the store].", show_default=False),
    ] = None,
    lines: Annotated[
        int,
        typer.Option("--lines", "-n", metavar="N", min=0, help="Show the last N events first."),
    ] = 10,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they come.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval", metavar="SECONDS", min=0.01, help="How often -f polls the store."
        ),
    ] = 0.5,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON Lines: one object per event.")
    ] = False,
) -> None:
    """Show the newest events of an agent or the store; -f follows new ones."""
    from .progress import bar

    url = resolve_url(ctx, db)
    show = _Printer(out_console(), json_out, with_agent=agent is None)

    async def go() -> None:
        async with open_store(url, key_file=key_file) as store:
            if agent is not None:
                head = await store.head(agent)
                if head == 0 and not follow:
                    raise AgentNotFound(agent)
                mark = await _mark(store, agent, head) if head else None
                for ev in await _last_events(store, agent, head, lines):
                    show(ev)
                if follow:
                    await _follow_agent(store, agent, (head, mark), show, interval)
                return
            heads = await _heads(store)
            forgotten: list[str] = []
            with bar("reading", disable=json_out or not lines) as progress:
                task = progress.add_task("tail", total=len(heads))
                recent = await newest_events(
                    store, heads, lines, forgotten, lambda: progress.advance(task)
                )
            for ev in recent:
                show(ev)
            _left_out(forgotten)
            if follow:
                await _follow_store(store, heads, show, interval, set(forgotten))

    try:
        run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
