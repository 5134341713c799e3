"""Rich rendering (tables, timelines, panels) and JSON shapes for the CLI."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import AgentLost, IntegrityError
from ._markup import escape, escape_id
from ._table import titled_table
from .charts import state_colour

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.table import Table

    from ..records import AgentInfo, Event, Snapshot
    from ..store.store import Problem

__all__ = [
    "agents_table",
    "event_json",
    "history_table",
    "iso",
    "local_time",
    "print_json",
    "problems_table",
    "shown",
    "snapshot_json",
    "snapshot_view",
]


# ------------------------------------------------------------------------- helpers


def iso(ts: float | None) -> str | None:
    """An epoch timestamp as ISO 8601 UTC with microseconds (None stays None; 0 is the
    epoch, 1970-01-01T00:00:00Z, not "unset")."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def local_time(ts: float | None, *, date: bool = True, ms: bool = True) -> str:
    """An epoch timestamp as local time for tables (to the millisecond unless ``ms``
    is False; without the date when ``date`` is False); "-" for None, while 0 is the epoch."""
    if ts is None:
        return "-"
    dt = datetime.fromtimestamp(ts).astimezone()
    text = dt.strftime("%Y-%m-%d %H:%M:%S.%f" if date else "%H:%M:%S.%f")
    return text[:-3] if ms else text[:-7]


def problems_json(problems: Iterable[Any]) -> list[dict[str, Any]]:
    """Verification problems (anything with ``agent_id``, ``seq``, ``reason``, and
    ``kind`` when it has one) as JSON."""
    out = []
    for p in problems:
        item = {"agent_id": p.agent_id, "seq": p.seq, "reason": p.reason}
        if hasattr(p, "kind"):
            item["kind"] = p.kind
        out.append(item)
    return out


def shown(value: Any) -> Any:
    """A loaded document (or event info, or ops) as the JSON an export writes: typed
    values tagged, so it prints (``json.dumps`` refused a ``Decimal``, ``bytes`` or a
    set) and says which values they are (:func:`statekeeper.codec.types.shown`)."""
    from ..codec.types import shown as tagged

    return tagged(value)


def print_json(value: Any, *, lines: bool = False) -> None:
    """Write JSON to stdout (plain text: no markup, no wrapping)."""
    if lines:
        for item in value:
            sys.stdout.write(json.dumps(item, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _state(value: str | None) -> str:
    if value is None:
        return "[dim]-[/]"
    return f"[{state_colour(value)}]{escape(value)}[/]"


# -------------------------------------------------------------------------- agents


def agent_json(
    info: AgentInfo | AgentLost,
    state: str | None,
    *,
    forgotten: bool = False,
    encrypted: bool = False,
) -> dict[str, Any]:
    """One agent row as JSON (``forgotten``: its data key was destroyed; ``encrypted``:
    its state is encrypted and no key was given, ``state`` is null; ``lost``: its
    stored data is gone, :class:`~statekeeper.errors.AgentLost`: nothing else known)."""
    if isinstance(info, AgentLost):
        return {
            "agent_id": info.agent_id,
            "head_seq": None,
            "state": None,
            "forgotten": False,
            "encrypted": False,
            "lost": True,
            "created_at": None,
            "updated_at": None,
        }
    return {
        "agent_id": info.agent_id,
        "head_seq": info.head_seq,
        "state": state,
        "forgotten": forgotten,
        "encrypted": encrypted,
        "lost": False,
        "created_at": iso(info.created_at),
        "updated_at": iso(info.updated_at),
    }


def lost_json(lost: Iterable[AgentLost]) -> list[dict[str, str]]:
    """The agents whose stored data is lost, as JSON: id and what was found."""
    return [{"agent_id": e.agent_id, "reason": e.reason} for e in lost]


def print_lost(console: Console, lost: Sequence[AgentLost]) -> None:
    """Say that ``lost`` agents' stored data is gone, and how to go on (nothing when
    there are none)."""
    if not lost:
        return
    import shlex

    named = ", ".join(repr(e.agent_id) for e in lost[:5]) + (" ..." if len(lost) > 5 else "")
    first = shlex.quote(lost[0].agent_id)
    console.print(
        f"[red]✗ {len(lost)} agent(s) lost their stored data[/] ({escape(named)}): "
        f"{escape(lost[0].reason)}; `statekeeper delete {escape(first)} --yes` acknowledges"
        " a loss; `statekeeper verify` lists every lost agent"
    )


def print_damaged(console: Console, damaged: Sequence[IntegrityError]) -> None:
    """Say that ``damaged`` agents' heads fail verification, and what to run (nothing
    when there are none)."""
    if not damaged:
        return
    named = ", ".join(repr(e.agent_id) for e in damaged[:5]) + (" ..." if damaged[5:] else "")
    console.print(
        f"[red]✗ {len(damaged)} agent(s) fail verification[/] ({escape(named)}):"
        f" {escape(str(damaged[0]))}; `statekeeper verify` lists every problem,"
        " `statekeeper repair` rebuilds what it can"
    )


def agents_table(
    rows: Iterable[tuple[AgentInfo | AgentLost, str | None, str | None]],
) -> Table:
    """Agents with head seq, state and times; a row's third item, when set, is shown in
    place of the state (``(forgotten)``, ``(encrypted)``)."""
    table = titled_table("Agents")
    table.add_column("agent", style="bold", overflow="fold")
    table.add_column("head seq", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    table.add_column("created", style="dim", no_wrap=True)
    for info, state, mark in rows:
        if isinstance(info, AgentLost):  # its data is gone: only its id is known
            table.add_row(escape_id(info.agent_id), "-", "[red](lost)[/]", "-", "-")
            continue
        table.add_row(
            escape_id(info.agent_id),
            str(info.head_seq),
            f"[dim]{escape(mark)}[/]" if mark else _state(state),
            local_time(info.updated_at, ms=False),
            local_time(info.created_at, ms=False),
        )
    return table


# ---------------------------------------------------------------------------- show


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """An agent's state as JSON."""
    return {
        "agent_id": snap.agent_id,
        "seq": snap.seq,
        "state": snap.fsm_state,
        "schema_version": snap.schema_version,
        "created_at": iso(snap.created_at),
        "updated_at": iso(snap.updated_at),
        # the record's 0.0 default means "no state machine entered" for this one field
        "state_entered_at": iso(snap.state_entered_at or None),
        "data": shown(snap.data),
    }


def snapshot_view(snap: Snapshot, head: int) -> Group:
    """An agent's state: a header grid, then its data document pretty-printed."""
    from rich.console import Group
    from rich.json import JSON
    from rich.panel import Panel
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")  # a long agent id folds, never cut short
    where = f"{snap.seq}" + ("" if snap.seq == head else f"  [dim](head is {head})[/]")
    grid.add_row("agent", escape_id(snap.agent_id))
    grid.add_row("seq", where)
    grid.add_row("state", _state(snap.fsm_state))
    grid.add_row("state entered", local_time(snap.state_entered_at or None))
    grid.add_row("updated", local_time(snap.updated_at))
    grid.add_row("created", local_time(snap.created_at))
    grid.add_row("schema", f"v{snap.schema_version}")
    data = JSON.from_data(shown(snap.data), indent=2, sort_keys=False)
    data.text.no_wrap = False  # long strings wrap instead of being cropped
    data.text.overflow = "fold"
    return Group(grid, Panel(data, title="data", title_align="left", border_style="dim"))


# ------------------------------------------------------------------------- history


def event_json(ev: Event) -> dict[str, Any]:
    """One event as JSON (a line of ``history --json``)."""
    return {
        "agent_id": ev.agent_id,
        "seq": ev.seq,
        "type": ev.type,
        "time": iso(ev.timestamp),
        "event": ev.info.get("event"),
        "from": ev.info.get("from"),
        "to": ev.info.get("to") if ev.type == "transition" else ev.fsm_state,
        "fsm_state": ev.fsm_state,
        "info": shown(ev.info),
        "ops": shown(ev.ops),
        "actor": ev.actor,
        "idempotency_key": ev.idempotency_key,
        "schema_version": ev.schema_version,
    }


_OP_MARK = {"add": "+", "remove": "-", "replace": "~"}


def _changes(ops: list[dict[str, Any]], width: int = 2) -> str:
    """``+/a, ~/b (+3)``: the JSON Patch paths an event touched."""
    if not ops:
        return ""
    marks = [
        f"{_OP_MARK.get(op.get('op', ''), op.get('op', '?') + ' ')}{op.get('path') or '/'}"
        for op in ops
    ]
    more = len(marks) - width
    return ", ".join(marks[:width]) + (f" (+{more})" if more > 0 else "")


def transition_text(ev_from: str | None, ev_to: str | None) -> str:
    """``from → to`` (or just ``→ to``)."""
    if ev_from is None and ev_to is None:
        return ""
    return f"{escape(ev_from or '')} → {_state(ev_to)}" if ev_from else f"→ {_state(ev_to)}"


def history_table(events: Iterable[Event], title: str, *, width: int = 120) -> Table:
    """Events: seq, time, event (or type), from→to, tool, and — when the console is
    ``width >= 110`` columns — the data changes and the actor.

    The time column shows the date only when it differs from the row above.
    """
    wide = width >= 110
    table = titled_table(title)
    # seq and time never wrap; the others fold when the row is too wide for the
    # terminal (a long tool or event name), so that no column is cut or dropped
    table.add_column("seq", justify="right", no_wrap=True, min_width=3)
    table.add_column("time", no_wrap=True)
    table.add_column("event / type", overflow="fold")
    table.add_column("from → to", overflow="fold")
    table.add_column("tool", overflow="fold")
    if wide:
        table.add_column("changes", style="dim", no_wrap=True, overflow="ellipsis", max_width=32)
        table.add_column("actor", style="dim", no_wrap=True, overflow="ellipsis", max_width=20)
    last_day = None
    for ev in events:
        meta = ev.info.get("metadata")
        tool = meta.get("tool") if isinstance(meta, dict) else None
        frm = ev.info.get("from") if ev.type == "transition" else None
        to = ev.info.get("to") if ev.type == "transition" else ev.fsm_state
        day = local_time(ev.timestamp)[:10]
        when = local_time(ev.timestamp, date=day != last_day)
        last_day = day
        name = ev.info.get("event") if ev.type == "transition" else None
        cells = [
            str(ev.seq),
            when,
            escape(str(name)) if name else f"[dim]{escape(ev.type)}[/]",
            transition_text(frm, to),
            escape(str(tool or "")),
        ]
        if wide:
            cells += [escape(_changes(ev.ops)), escape(ev.actor or "")]
        table.add_row(*cells)
    return table


# -------------------------------------------------------------------------- verify


def problems_table(problems: Iterable[Problem]) -> Table:
    """Verification problems: agent, seq, reason."""
    from rich.table import Table

    table = Table(title="Problems", title_justify="left", title_style="bold red")
    table.add_column("agent", style="bold", overflow="fold")
    table.add_column("seq", justify="right")
    table.add_column("problem", style="red", overflow="fold")
    for p in problems:
        table.add_row(escape_id(p.agent_id), "-" if p.seq is None else str(p.seq), escape(p.reason))
    return table


#: what the codec says of a record it cannot open for want of its key: the key id is
#: not in the keyring (errors.KeyNotFound), or its material differs (DecryptionError)
_KEY_REASONS = ("which is not in the keyring", "wrong key material in the keyring")


def key_problems(problems: Iterable[Problem]) -> list[Problem]:
    """The problems that are records this keyring cannot open (a missing or wrong key
    file), not damage: neither ``repair`` nor a backup helps, the right key does."""
    from ..store.verification import key_trouble

    return [p for p in problems if key_trouble(p) is not None]


def key_hint(problems: Iterable[Problem], *, no_key: bool = False) -> str | None:
    """One line saying that ``problems`` are (partly) a key problem, or None.
    ``no_key``: the store was opened with no key at all (not a wrong one)."""
    return key_hint_for([p.reason for p in problems], no_key=no_key)


def key_hint_for(reasons: Iterable[str], *, no_key: bool = False) -> str | None:
    """:func:`key_hint` of problems given by their text (``audit verify``'s)."""
    n = sum(any(r in reason for r in _KEY_REASONS) for reason in reasons)
    if not n:
        return None
    if no_key:
        return (
            f"{n} problem(s): records encrypted, and no key was given, not found damaged;"
            " run again with the store's keys (pass --key-file FILE or set"
            " $STATEKEEPER_KEY_FILE or $STATEKEEPER_KEYS)"
        )
    return (
        f"{n} problem(s): records encrypted with a key the keyring given lacks (or holds "
        "other material for), not found damaged; run again with the store's keys "
        "(--key-file FILE, $STATEKEEPER_KEY_FILE or $STATEKEEPER_KEYS)"
    )


# ---------------------------------------------------------------------------- demo


class DemoReporter:
    """Live narration of :func:`statekeeper.demo.run_demo` (a spinner while steps run)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status: Any = None

    def _spin(self, text: str) -> None:
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def __call__(self, kind: str, info: dict[str, Any]) -> None:
        c = self.console
        if kind == "start":
            c.print(
                f"[bold]statekeeper demo[/] — research agent [bold]{escape_id(info['agent_id'])}"
                f"[/] in {escape(info['db'])}"
            )
        elif kind == "worker_started":
            c.print(f"worker process pid {info['pid']} started")
            self._spin("worker running…")
        elif kind in ("worker_commit", "resume_commit"):
            who = "worker" if kind == "worker_commit" else "resumed agent"
            tool = f" {info['tool']}" if info.get("tool") else ""
            self._spin(f"{who}: committed seq {info['seq']} ({info['event']}{tool})")
        elif kind == "kill_sent":
            self._stop()
            c.print(
                f"[bold red]✖ SIGKILL[/] sent to worker pid {info['pid']} right after it "
                f"committed seq {info['seq']}"
            )
        elif kind == "worker_commit_after_kill":
            c.print(f"  [dim](worker committed seq {info['seq']} before the signal landed)[/]")
        elif kind == "worker_died":
            c.print(
                f"worker pid {info['pid']} is dead (return code {info['returncode']}); "
                f"last seq it reported: {info['last_seq']}"
            )
        elif kind == "recovered":
            c.print(
                f"[bold green]↻ resumed[/] in this process: store reopened and agent loaded "
                f"in [bold]{info['recovery_ms']:.2f} ms[/] — state "
                f"{_state(info['state'])}, seq {info['seq']}"
            )
            self._spin("resumed agent running…")

    def close(self) -> None:
        """Stop the spinner, if any."""
        self._stop()


def demo_timeline(summary: dict[str, Any], width: int = 120) -> Table:
    """The agent's stored events with the crash marked where the worker died.

    Below 100 columns the time column shows the time since the first event
    (``+1.234s``) instead of the local time, so that every column fits in 80."""
    timeline = summary["timeline"]
    narrow = width < 100
    start = timeline[0]["ts"] if timeline else 0.0
    worker = summary["worker"]
    table = titled_table("Timeline (read back from the store)")
    table.add_column("seq", justify="right", no_wrap=True, min_width=3)
    table.add_column("after" if narrow else "time", no_wrap=True, min_width=7 if narrow else 12)
    table.add_column("event / type", no_wrap=True)
    table.add_column("from → to", no_wrap=True)
    table.add_column("tool", no_wrap=True)
    table.add_column("by", no_wrap=True)
    crashed = False
    for row in timeline:
        by = (row.get("actor") or "").split(":", 1)[0]
        if by == "resume" and not crashed:
            crashed = True
            table.add_row(
                "",
                "",
                "[bold red]✖ SIGKILL[/]",
                f"[red]worker pid {worker['pid']} dies[/]",
                "",
                "",
                end_section=True,
            )
        table.add_row(
            str(row["seq"]),
            f"+{row['ts'] - start:.3f}s" if narrow else local_time(row["ts"], date=False),
            escape(row["event"] or row["type"]),
            transition_text(row.get("from"), row.get("to")),
            escape(row.get("tool") or ""),
            "[cyan]resume[/]" if by == "resume" else ("worker" if by else ""),
        )
    return table


def demo_position(summary: dict[str, Any]) -> Panel:
    """Where the agent was found after the crash, and how long finding it took."""
    from rich.panel import Panel
    from rich.table import Table

    rec = summary["recovered"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("state", _state(rec["state"]))
    grid.add_row(
        "seq",
        f"{rec['seq']}  [dim](snapshot at seq {rec['snapshot_seq']} + "
        f"{rec['events_replayed']} event(s) replayed)[/]",
    )
    grid.add_row(
        "step",
        f"{rec['step']} tool call(s) completed: "
        + (escape(", ".join(rec["tool_calls_done"])) or "none"),
    )
    flight = rec.get("in_flight")
    if flight:
        grid.add_row(
            "in flight",
            f"{escape(flight['call_id'])} — intent stored, result not: "
            "re-invoked with its call id as idempotency key",
        )
    nxt = rec.get("next")
    if nxt:
        grid.add_row(
            "next",
            f"{escape(nxt['tool'])}({escape(json.dumps(nxt['args']))}) "
            f"[dim]{escape(nxt['call_id'])}[/]",
        )
    grid.add_row(
        "recovery time",
        f"[bold]{summary['recovery_ms']:.2f} ms[/] [dim](reopen the store + load the agent)[/]",
    )
    return Panel(
        grid, title="Recovered position", title_align="left", border_style="cyan", expand=False
    )


def demo_tools(summary: dict[str, Any]) -> Table:
    """Each tool call: how often it executed (from the tool's own fsynced log)."""
    table = titled_table(
        "Tool calls, counted from the tools' own fsynced log",
        caption="ran = executions · pre-crash = result stored before the kill · "
        "post-crash = invocations after it\n" + escape(summary["tool_log"]),
        caption_justify="left",
    )
    table.add_column("call", no_wrap=True)
    table.add_column("tool", no_wrap=True)
    table.add_column("ran", justify="right", no_wrap=True)
    table.add_column("by", no_wrap=True)
    table.add_column("replays", justify="right", no_wrap=True)
    table.add_column("pre-crash", justify="center", no_wrap=True)
    table.add_column("post-crash", justify="right", no_wrap=True)
    table.add_column("ok", justify="center", no_wrap=True, min_width=2)
    for r in summary["tool_calls"]:
        good = r["executed"] == 1 and not (r["completed_before_crash"] and r["invoked_after_crash"])
        table.add_row(
            escape(r["call_id"]),
            escape(r["tool"]),
            str(r["executed"]),
            ", ".join(r["executed_by"]),
            str(r["replayed"]) if r["replayed"] else "",
            "yes" if r["completed_before_crash"] else "",
            str(r["invoked_after_crash"]),
            "[green]✓[/]" if good else "[bold red]✗[/]",
        )
    return table


def demo_checks(summary: dict[str, Any]) -> Table:
    """The pass/fail list."""
    from rich.table import Table

    table = Table.grid(padding=(0, 1))
    for name, ok in summary["checks"].items():
        mark = "[green]✓[/]" if ok else "[bold red]✗[/]"
        table.add_row(mark, name.replace("_", " "))
    return table
