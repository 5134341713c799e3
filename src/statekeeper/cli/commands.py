"""The commands: agents, show, history, verify, diagram, delete, stats."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import AgentLost, AgentNotFound, HistoryCompacted
from . import render
from ._markup import escape, escape_id
from .app import (
    DbOption,
    JsonOption,
    KeyFileOption,
    app,
    fail,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)
from .heads import ENCRYPTED, FORGOTTEN, LOST, head_or_damaged
from .times import parse_time as _parse_time

if TYPE_CHECKING:
    from ..records import Event
    from ..store import StateStore, VerifyReport

AgentArg = Annotated[str, typer.Argument(help="The agent id.", show_default=False)]


async def _require(store: StateStore, agent_id: str) -> int:
    head = await store.head(agent_id)
    if head == 0:
        raise AgentNotFound(agent_id)
    return head


# -------------------------------------------------------------------------- agents


@app.command()
@handled
def agents(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Agents per page.")] = 50,
    after: Annotated[
        str | None,
        typer.Option("--after", metavar="AGENT", help="Start after this agent id (the next page)."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """List agents (ordered by id) with head seq, state and last update."""
    url = resolve_url(ctx, db)

    from ..errors import IntegrityError
    from .progress import bar

    damaged: list[IntegrityError] = []  # heads failing verification: marked, named

    async def go() -> tuple[list[tuple[Any, str | None, str | None]], str | None]:
        from ..store.listing import agents_past_lost

        async with open_store(url, key_file=key_file) as store:
            # an agent whose data is lost (AgentLost) is listed as such: the rest go on
            page: list[Any] = []
            listing = agents_past_lost(store.list_agents, after, limit + 1)
            async with contextlib.aclosing(listing):
                async for item in listing:
                    page.append(item)
                    if len(page) > limit:
                        break
            more = len(page) > limit
            page = page[:limit]
            rows: list[tuple[Any, str | None, str | None]] = []
            with bar("reading heads", disable=json_out) as progress:
                task = progress.add_task("heads", total=len(page))
                for info in page:
                    if isinstance(info, AgentLost):
                        rows.append((info, None, None))
                    else:
                        state, mark = await head_or_damaged(store, info.agent_id, damaged)
                        rows.append((info, state, mark))
                    progress.advance(task)
            return rows, (page[-1].agent_id if more and page else None)

    rows, next_after = run(go())
    lost = [i for i, _, _ in rows if isinstance(i, AgentLost)]
    encrypted = any(mark == ENCRYPTED for _, _, mark in rows)
    if json_out:
        render.print_json(
            {
                "agents": [
                    render.agent_json(
                        i, s, forgotten=mark == FORGOTTEN, encrypted=mark == ENCRYPTED
                    )
                    for i, s, mark in rows
                ],
                "next_after": next_after,
                # the agents listed whose stored data is lost: id and what was found
                "lost": render.lost_json(lost),
                "damaged": [{"agent_id": e.agent_id, "reason": str(e)} for e in damaged],
            }
        )
        return
    console = out_console()
    if not rows:
        console.print("no agents" + (f" after {escape(after)!r}" if after else ""))
        return
    console.print(render.agents_table(rows))
    render.print_lost(console, lost)
    render.print_damaged(console, damaged)
    if encrypted:
        console.print(
            f"{ENCRYPTED}: the data and states of these agents are encrypted and no key"
            " was given (ids and times are stored in the clear); pass --key-file FILE or"
            " set $STATEKEEPER_KEY_FILE to show their states"
        )
    if next_after is not None:
        from .paging import print_next_page

        print_next_page(
            console,
            ctx,
            "agents",
            {"key_file": "--key-file", "limit": "--limit"},
            "--after",
            next_after,
        )


# ---------------------------------------------------------------------------- show


@app.command()
@handled
def show(
    ctx: typer.Context,
    agent: AgentArg,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    at: Annotated[
        int | None, typer.Option("--at", metavar="SEQ", min=1, help="The state as of this seq.")
    ] = None,
    at_time: Annotated[
        str | None,
        typer.Option(
            "--at-time",
            metavar="TIME",
            help="The state as of this time (ISO 8601, naive = local; or epoch seconds).",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Show an agent's state and data (latest, or as of --at SEQ / --at-time TIME)."""
    if at is not None and at_time is not None:
        raise typer.BadParameter("give --at or --at-time, not both")
    when = _parse_time(at_time) if at_time is not None else None
    url = resolve_url(ctx, db)

    async def go() -> tuple[Any, int]:
        async with open_store(url, key_file=key_file) as store:
            head = await _require(store, agent)
            # to the end of its µs: an event's own time, as shown (rounded), includes it
            through = None if when is None else when + 5e-7
            try:
                snap = await store.load(agent, at_seq=at, at_time=through)
            except AgentNotFound:
                if when is None:
                    raise
                moment = datetime.fromtimestamp(when, UTC).isoformat(timespec="microseconds")
                raise fail(f"agent {agent!r} did not exist yet at {moment}", 1) from None
            return snap, head

    snap, head = run(go())
    if json_out:
        render.print_json({**render.snapshot_json(snap), "head_seq": head})
        return
    out_console().print(render.snapshot_view(snap, head))


# ------------------------------------------------------------------------- history


@app.command()
@handled
def history(
    ctx: typer.Context,
    agent: AgentArg,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    after: Annotated[
        int, typer.Option("--after", metavar="SEQ", min=0, help="Only events after this seq.")
    ] = 0,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="At most this many events.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON Lines: one object per event.")
    ] = False,
    timeline: Annotated[
        bool,
        typer.Option(
            "--timeline", "-t", help="Show the stays in each state on a time axis instead."
        ),
    ] = False,
) -> None:
    """Show an agent's events, oldest first (or its states on a timeline)."""
    url = resolve_url(ctx, db)

    from .progress import bar

    compacted: list[int] = []  # the retention base, when history before it is gone

    async def go() -> tuple[list[Event], int]:
        async with open_store(url, key_file=key_file) as store:
            head = await _require(store, agent)
            to_seq = after + limit if limit is not None else None
            last = min(head, to_seq) if to_seq is not None else head
            events = []
            with bar("reading events", unit="events", disable=json_out) as progress:
                task = progress.add_task("history", total=max(0, last - after))

                async def read(start: int) -> None:
                    async for ev in store.history(agent, after_seq=start, to_seq=to_seq):
                        events.append(ev)
                        progress.advance(task)

                try:
                    await read(after)
                except HistoryCompacted as exc:  # show what retention kept
                    if events:
                        raise
                    compacted.append(exc.base_seq)
                    await read(exc.base_seq)
            # the stay open when they start: the timeline draws it (--json prints events)
            if timeline and not json_out and events and events[0].seq > 1:
                before = await store.load(agent, at_seq=events[0].seq - 1)
                if before.fsm_state is not None:
                    opening.append((before.seq, before.fsm_state, before.state_entered_at))
            return events, head

    opening: list[tuple[int, str, float]] = []
    events, head = run(go())
    if compacted and not json_out:
        out_console().print(f"[dim]history up to seq {compacted[0]} was compacted by retention[/]")
    if json_out:
        render.print_json([render.event_json(ev) for ev in events], lines=True)
        return
    console = out_console()
    if not events:
        console.print(f"no events after seq {after} (head is {head})")
        return
    if timeline:
        from .charts import timeline_table

        console.print(
            timeline_table(
                events,
                f"States of {escape_id(agent)} (seq {events[0].seq}–{events[-1].seq} of {head})",
                width=console.width,
                opening=opening[0] if opening else None,
            )
        )
        return
    console.print(
        render.history_table(
            events,
            f"History of {escape_id(agent)} (seq {events[0].seq}–{events[-1].seq} of {head})",
            width=console.width,
        )
    )


# -------------------------------------------------------------------------- verify


@app.command()
@handled
def verify(
    ctx: typer.Context,
    agent_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Agents to check (default: every agent).", show_default=False),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Check every stored record: checksums, gap-free seqs, heads, snapshots.

    Exit code 1 when any problem is found.
    """
    url = resolve_url(ctx, db)

    from ..store import VerifyReport
    from ..store.listing import agents_past_lost
    from ..store.verification import VERIFY_PAGE, in_page_order
    from .progress import bar

    no_key = False  # the store opened without any key: its hint says so

    async def go() -> VerifyReport:
        nonlocal no_key
        total = VerifyReport()
        async with open_store(url, key_file=key_file) as store:
            no_key = getattr(store.codec, "keyring", None) is None
            if agent_ids:
                for agent_id in agent_ids:
                    with contextlib.suppress(AgentLost):  # a finding: its check reports it
                        await _require(store, agent_id)
                todo: Any = agent_ids
                count = len(agent_ids)
            else:
                count = await store.count_agents()
                todo = None
            with bar("verifying", disable=json_out) as progress:
                task = progress.add_task("verify", total=count)

                async def each() -> Any:
                    if todo is not None:
                        for a in todo:
                            yield a
                    else:  # a lost agent too: its check reports the loss, the rest go on
                        async for info in agents_past_lost(store.list_agents):
                            yield info.agent_id

                seen: set[str] = set()
                page: list[str] = []

                async def check(page: list[str]) -> None:
                    # one verify a page of agents: the witness file read, its marks
                    # sorted and their check once a page, not once an agent
                    report = await store.verify(page)
                    total.agents += report.agents
                    total.events += report.events
                    total.snapshots += report.snapshots
                    total.keys += report.keys
                    total.problems.extend(in_page_order(report.problems, page))
                    total.forgotten.extend(report.forgotten)
                    total.non_normal.extend(report.non_normal)
                    progress.advance(task, len(page))

                async for agent_id in each():
                    if agent_id in seen and agent_id in page:
                        await check(page)  # (named twice: checked twice, as alone)
                        page = []
                    seen.add(agent_id)
                    page.append(agent_id)
                    if len(page) >= VERIFY_PAGE:
                        await check(page)
                        page = []
                if page:
                    await check(page)
            if todo is None:  # agents the witness saw that the store lost entirely
                lost = await store.witness_problems()
                total.problems.extend(p for p in lost if p.agent_id not in seen)
                # events stored with no head row: no listing shows their agent
                total.problems.extend(await store.orphan_problems(seen))
        return total

    report = run(go())
    from .intents import naming_the_store

    report.problems[:] = naming_the_store(report.problems, url)  # (a command it suggests)
    if json_out:
        render.print_json(
            {
                "ok": report.ok,
                "agents": report.agents,
                "events": report.events,
                "snapshots": report.snapshots,
                "problems": render.problems_json(report.problems),
                # crypto-shredded agents (statekeeper forget): unreadable by design
                **({"forgotten": report.forgotten} if report.forgotten else {}),
                **({"non_normal_ids": report.non_normal} if report.non_normal else {}),
            }
        )
    else:
        console = out_console()
        summary = (
            f"{report.agents} agent(s), {report.events} event(s), "
            f"{report.snapshots} snapshot(s) checked"
        )
        if report.forgotten:
            summary += f", {len(report.forgotten)} forgotten (crypto-shredded)"
        if odd := report.non_normal:  # (empty, '.' or '..' segments: no new agent may have one)
            ids = escape(", ".join(odd))
            console.print(f"[yellow]{len(odd)} agent(s) under ids that are not normal: {ids}[/]")
        if report.ok:
            console.print(f"[green]✓ OK[/] — {summary}, no problems")
        else:
            console.print(render.problems_table(report.problems))
            console.print(f"[bold red]✗ {len(report.problems)} problem(s)[/] — {summary}")
            hint = render.key_hint(report.problems, no_key=no_key)
            if hint is not None:
                console.print(f"[yellow]{escape(hint)}[/]")
            keyed = render.key_problems(report.problems)
            # (as repair judges: not an agent whose events, chain or head are damaged
            # too, as a compacted agent's damaged base is: nothing to replay it from)
            beyond = {p.agent_id for p in report.problems if p.kind not in _REBUILT_ALONGSIDE}
            if any(
                p.kind == "snapshot" and p not in keyed and p.agent_id not in beyond
                for p in report.problems
            ):
                console.print(
                    "damaged snapshots do not stop loads (they fall back to older snapshots"
                    " or a replay); `statekeeper repair` rebuilds them"
                )
    if not report.ok:
        raise typer.Exit(1)


#: the problems of an agent whose damaged snapshots repair still rebuilds
_REBUILT_ALONGSIDE = frozenset({"snapshot", "idempotency"})


# --------------------------------------------------------------------------- stats


@app.command()
@handled
def stats(
    ctx: typer.Context,
    db: DbOption = None,
    top: Annotated[
        int, typer.Option("--top", metavar="N", min=0, help="List the N largest agents.")
    ] = 5,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Summarise the store: agents, events, states, size.

    ``events`` counts the events the store holds (read raw, nothing decoded: history
    retention removed is not counted); ``events written`` is the sum of the agents'
    head seqs, every event ever appended.
    """
    import heapq

    from .progress import bar

    url = resolve_url(ctx, db)

    from ..errors import IntegrityError
    from ..store.listing import agents_past_lost

    lost: list[AgentLost] = []
    damaged: list[IntegrityError] = []  # heads failing verification: counted, named

    async def go() -> dict[str, Any]:
        async with open_store(url, key_file=key_file) as store:
            states: dict[str, int] = {}
            agents_n = events_n = written_n = 0
            last: float | None = None  # 0.0 is the epoch, a real time
            largest: list[tuple[int, str, int]] = []  # a min-heap of (bytes, agent, events)
            total = await store.count_agents()
            with bar("reading heads", disable=json_out) as progress:
                task = progress.add_task("stats", total=total)
                async for info in agents_past_lost(store.list_agents):
                    agents_n += 1
                    if isinstance(info, AgentLost):  # counted, listed below; the rest go on
                        lost.append(info)
                        states[LOST] = states.get(LOST, 0) + 1
                        progress.advance(task)
                        continue
                    written_n += info.head_seq
                    last = info.updated_at if last is None else max(last, info.updated_at)
                    state, mark = await head_or_damaged(store, info.agent_id, damaged)
                    key = mark or state or "-"
                    states[key] = states.get(key, 0) + 1
                    # what is stored: retention's compactions removed history below
                    # the head (the head seq counts every event ever written)
                    size = await store.stored_size(info.agent_id)
                    events_n += size.events
                    if top:
                        item = (size.total, info.agent_id, size.events)
                        if len(largest) < top:
                            heapq.heappush(largest, item)
                        else:
                            heapq.heappushpop(largest, item)
                    progress.advance(task)
            health = await store.health()
            return {
                "backend": health.backend,
                # a store that lost an agent's data is not healthy, whatever its server says
                "healthy": health.ok and not lost and not damaged,
                "bytes": health.detail.get("bytes"),
                "agents": agents_n,
                "events": events_n,
                "events_written": written_n,
                "states": dict(sorted(states.items(), key=lambda kv: (-kv[1], kv[0]))),
                "largest": [
                    {"agent_id": a, "events": n, "bytes": b}
                    for b, a, n in sorted(largest, key=lambda t: (-t[0], t[1]))
                ],
                "last_update": render.iso(last),
                # the agents whose stored data is lost (counted in agents and states)
                "lost": render.lost_json(lost),
                "damaged": [{"agent_id": e.agent_id, "reason": str(e)} for e in damaged],
            }

    data = run(go())
    if json_out:
        render.print_json(data)
        return
    from rich.table import Table

    from ..backends.redact import mask_url
    from .charts import human_bytes, sizes_table, state_bars

    console = out_console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("backend", f"{data['backend']} ({escape(mask_url(url))})")
    why = [f"{len(lost)} agent(s) lost"] * bool(lost) + [f"{len(damaged)} damaged"] * bool(damaged)
    unhealthy = f"[red]no[/] ({', '.join(why)}, below)" if why else "[red]no[/]"
    grid.add_row("healthy", "[green]yes[/]" if data["healthy"] else unhealthy)
    if data["bytes"] is not None:
        grid.add_row("size", f"{data['bytes']:,} bytes ({human_bytes(data['bytes'])})")
    grid.add_row("agents", f"{data['agents']:,}")
    removed = data["events_written"] - data["events"]
    grid.add_row(
        "events",
        f"{data['events']:,} stored"
        + (
            f" ({data['events_written']:,} written, {removed:,} since removed)"
            if removed > 0
            else ""
        ),
    )
    grid.add_row("last update", data["last_update"] or "-")
    console.print(grid)
    if data["states"]:
        console.print()
        console.print(state_bars(data["states"], console.width))
    if data["largest"]:
        console.print(sizes_table(data["largest"], console.width))
    render.print_lost(console, lost)
    render.print_damaged(console, damaged)
