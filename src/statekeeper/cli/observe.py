"""``statekeeper health`` and ``statekeeper analyze`` (see :mod:`statekeeper.observability`;
the ``metrics`` commands are in :mod:`.observe_metrics`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    from ..observability.health import HealthReport, HealthThresholds


def _finite(value: float | None) -> float | None:
    """A number of seconds must be finite: ``inf`` passes an option's ``min`` (an
    endless entropy window has no start, its JSON was ``NaN``; an infinite objective
    printed ``Infinity``, which is not JSON)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value


StuckOption = Annotated[
    float | None,
    typer.Option(
        "--stuck-after",
        metavar="SECONDS",
        min=0,
        help="An agent in a non-settled state longer than this is stuck [default: 3600].",
        show_default=False,
    ),
]


def _thresholds(
    stuck_after: float | None,
    stuck_factor: float | None,
    settled: list[str] | None,
    max_state_bytes: int | None,
    max_replay: int | None,
    growth_window: float,
    top: int,
) -> HealthThresholds:
    from ..observability.health import HealthThresholds

    base = HealthThresholds()
    return HealthThresholds(
        stuck_after=base.stuck_after if stuck_after is None else stuck_after,
        stuck_factor=base.stuck_factor if stuck_factor is None else stuck_factor or None,
        settled_states=frozenset(settled) if settled else base.settled_states,
        max_state_bytes=base.max_state_bytes if max_state_bytes is None else max_state_bytes,
        max_replay_events=max_replay,
        growth_window=growth_window,
        top=top,
    )


@app.command()
@handled
def health(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    stuck_after: StuckOption = None,
    stuck_factor: Annotated[
        float | None,
        typer.Option(
            "--stuck-factor",
            metavar="X",
            min=0,
            help="... or longer than X times its own usual time there (0: off) [default: 5].",
            show_default=False,
        ),
    ] = None,
    settled: Annotated[
        list[str] | None,
        typer.Option(
            "--settled",
            metavar="STATE",
            help="A state agents may rest in for ever (repeat) [default: idle, completed].",
            show_default=False,
        ),
    ] = None,
    max_state_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-state-bytes",
            metavar="BYTES",
            min=1,
            help="A larger state is a breach [default: 16 MiB].",
            show_default=False,
        ),
    ] = None,
    max_replay: Annotated[
        int | None,
        typer.Option(
            "--max-replay",
            metavar="EVENTS",
            min=1,
            help="A load replaying more events is a breach [default: 2 × snapshot_every].",
            show_default=False,
        ),
    ] = None,
    growth_window: Annotated[
        float,
        typer.Option(
            "--growth-window",
            metavar="SECONDS",
            min=1,
            callback=_finite,
            help="Window of 'fastest growing'.",
        ),
    ] = 3600.0,
    top: Annotated[int, typer.Option("--top", min=1, help="Entries per top list.")] = 10,
    verify: Annotated[
        bool, typer.Option("--verify", help="Also verify every record (reads everything).")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """State health: agents by state, stuck agents, largest and fastest-growing
    streams, streams due a snapshot, stale leases (and, with --verify, damage).

    Exit code 1 when a threshold is breached (usable as a cron check).
    """
    from ..observability.health import health_report

    url = resolve_url(ctx, db)
    limits = _thresholds(
        stuck_after, stuck_factor, settled, max_state_bytes, max_replay, growth_window, top
    )

    async def go() -> HealthReport:
        async with open_store(url, key_file=key_file) as store:
            return await health_report(store, limits, verify=verify)

    report = run(go())
    if json_out:
        render.print_json({**report.to_dict(), "generated_at": render.iso(report.generated_at)})
    else:
        from .observe_render import health_renderables

        console = out_console()
        for item in health_renderables(report, console.width):
            console.print(item)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@handled
def analyze(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    group: Annotated[
        str,
        typer.Option(
            "--group", help="One matrix for 'all' agents, or one per agent-id 'namespace'."
        ),
    ] = "all",
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="TIME", help="Only transitions at or after TIME."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="TIME", help="Only transitions before TIME.")
    ] = None,
    window: Annotated[
        float | None,
        typer.Option(
            "--window",
            metavar="SECONDS",
            callback=_finite,
            min=1,
            help="Also show the entropy of transitions per window of this length.",
        ),
    ] = None,
    rto: Annotated[
        float | None,
        typer.Option(
            "--rto",
            metavar="SECONDS",
            callback=_finite,
            min=0.000001,
            help="Recovery time objective: measure recovery and exit 1 if it is missed.",
        ),
    ] = None,
    mtbf: Annotated[
        float | None,
        typer.Option(
            "--mtbf",
            metavar="SECONDS",
            callback=_finite,
            min=0.000001,
            help="Mean time between failures (cold loads): advise a snapshot interval.",
        ),
    ] = None,
    consistency: Annotated[
        bool,
        typer.Option("--consistency", help="Compute the state consistency score (verifies all)."),
    ] = False,
    states: Annotated[
        list[str] | None,
        typer.Option("--state", metavar="STATE", help="A legal state (repeat; consistency)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Also write the matrix as a heat map to FILE (.svg or .png; one file per"
            " group, the group's name added before the suffix).",
        ),
    ] = None,
    diagram_out: Annotated[
        Path | None,
        typer.Option(
            "--diagram-out",
            metavar="FILE",
            help="Also write the machine with the observed probabilities on its edges to"
            " FILE (.svg or .png).",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """The seed's mathematics from recorded history: transition matrix P with
    confidence intervals, stationary distribution, entropies, measured and predicted
    recovery time, consistency score, optimal snapshot interval (Young/Daly)."""
    from .times import parse_time as _parse_time

    if group not in ("all", "namespace"):
        raise typer.BadParameter("must be 'all' or 'namespace'", param_hint="'--group'")
    from .observe_plots import check_picture_paths, write_matrix_pictures

    check_picture_paths(out, diagram_out)
    url = resolve_url(ctx, db)
    start = _parse_time(since, "--since") if since is not None else None
    end = _parse_time(until, "--until") if until is not None else None
    result = run(_analyze(url, key_file, group, start, end, window, rto, mtbf, consistency, states))
    written = write_matrix_pictures(result["matrices"], out, diagram_out)
    if json_out:
        if written:
            result["pictures"] = [str(p) for p in written]
        render.print_json(result)
    else:
        _print_analysis(result, asked_interval=mtbf is not None)
        for path in written:
            out_console().print(f"wrote {path}")
    if rto is not None and result["recovery"] is not None and not result["recovery"]["met"]:
        raise typer.Exit(1)


async def _analyze(
    url: str,
    key_file: Any,
    group: str,
    since: float | None,
    until: float | None,
    window: float | None,
    rto: float | None,
    mtbf: float | None,
    consistency: bool,
    states: list[str] | None,
) -> dict[str, Any]:
    from ..governance.hooks import is_store_admin
    from ..observability.analysis import entropy, normalized_entropy, optimal_snapshot_interval
    from ..observability.analysis.checkpoint import daly_interval, young_interval
    from ..observability.analysis.consistency import consistency_score
    from ..observability.analysis.history import (
        entropy_windows,
        state_distribution,
        transition_matrices,
    )
    from ..observability.analysis.recovery import measure_recovery, measure_snapshot_cost
    from .stores import env_keyring, namespace_options

    out: dict[str, Any] = {}
    forgotten: list[str] = []  # crypto-shredded agents: passed over, as by export
    compacted: list[str] = []  # agents read from their retention base
    async with open_store(url, key_file=key_file) as store:
        matrices = await transition_matrices(
            store,
            group_by="namespace" if group == "namespace" else "all",
            since=since,
            until=until,
            forgotten=forgotten,
            compacted=compacted,
        )
        out["compacted"] = compacted
        out["matrices"] = {name: m.to_dict() for name, m in matrices.items()}
        counts = await state_distribution(store, forgotten=forgotten)
        out["forgotten"] = sorted(set(forgotten))
        total = sum(counts.values())
        dist = [n / total for n in counts.values()] if total else []
        out["states"] = {
            "agents": counts,
            "entropy": entropy(dist),
            "normalized_entropy": normalized_entropy(dist),
        }
        out["entropy_windows"] = (
            [
                {"start": w.start, "end": w.end, "moves": w.moves, "entropy": w.entropy}
                for w in await entropy_windows(store, window, since=since, until=until)
            ]
            if window is not None
            else None
        )
        out["consistency"] = (
            (await consistency_score(store, states=states)).to_dict() if consistency else None
        )
        snapshot_every = store.snapshot_every
        snapshot_cost = await measure_snapshot_cost(store) if mtbf is not None else 0.0
        # the recovery is measured on a store of its own (cold, uncached, no policy):
        # under --as it loads only the agents this principal may read
        readable = None
        if (rto is not None or mtbf is not None) and not is_store_admin(store):
            readable = [info.agent_id async for info in store.iter_agents()]
    recovery = None
    if rto is not None or mtbf is not None:
        recovery = await measure_recovery(
            url,
            keyring=env_keyring(key_file),
            agents=readable,
            objective=rto,
            **namespace_options(),
        )
    out["recovery"] = recovery.to_dict() if recovery is not None else None
    out["checkpoint"] = None
    if mtbf is not None and recovery is not None and recovery.per_event > 0:
        # events appended per failure: the store's recent event rate times the MTBF
        rate = sum(counts.values()) and await _event_rate(url, key_file)
        cost = max(snapshot_cost, 1e-6)
        events = max(rate * mtbf, 1.0)
        replay_mtbf = recovery.per_event * events
        out["checkpoint"] = {
            "snapshot_cost_seconds": cost,
            "replay_seconds_per_event": recovery.per_event,
            "events_per_second": rate,
            "events_between_failures": events,
            "young_interval_events": optimal_snapshot_interval(
                cost, recovery.per_event, events, formula="young"
            ),
            "daly_interval_events": optimal_snapshot_interval(
                cost, recovery.per_event, events, formula="daly"
            ),
            "young_interval_replay_seconds": young_interval(cost, replay_mtbf),
            "daly_interval_replay_seconds": daly_interval(cost, replay_mtbf),
            "current_snapshot_every": snapshot_every,
        }
    return out


async def _event_rate(url: str, key_file: Any, window: float = 3600.0) -> float:
    """Events per second appended over the last ``window`` seconds (all agents; of the
    namespace under ``--namespace``)."""
    import time

    from ..store.namespaced import stored_id

    async with open_store(url, key_file=key_file) as store:
        now = time.time()
        events = 0
        async for info in store.iter_agents():
            if info.updated_at >= now - window:
                stored = stored_id(store, info.agent_id)
                events += info.head_seq - await store.backend.seq_at(stored, now - window)
    return events / window


def _print_analysis(result: dict[str, Any], *, asked_interval: bool = False) -> None:
    from ..observability.analysis.markov import TransitionMatrix
    from .charts import duration
    from .observe_render import matrix_table

    console = out_console()
    if not result["matrices"]:
        console.print("no transitions recorded (no agent's machine has moved yet)")
    for name, d in result["matrices"].items():
        m = TransitionMatrix.from_dict(d)
        title = f"group {escape(repr(name))}" if name != "all" else "all agents"
        console.print(matrix_table(m, title))
    if result["forgotten"]:
        gone = result["forgotten"]
        console.print(
            f"left out {len(gone)} forgotten agent(s) (their data keys are destroyed): "
            + escape(", ".join(gone))
        )
    if result["compacted"]:
        kept = result["compacted"]
        console.print(
            f"{len(kept)} agent(s) read from their retention base (their moves before it"
            " were compacted away): " + escape(", ".join(kept[:5]) + (" ..." if kept[5:] else ""))
        )
    s = result["states"]
    shares = " · ".join(f"{escape(state or '(none)')} {n}" for state, n in s["agents"].items())
    console.print(
        f"agents by state: {shares}; entropy {s['entropy']:.3f} bits"
        f" (normalised {s['normalized_entropy']:.3f})"
    )
    if result["entropy_windows"]:
        from .charts import hbar

        console.print("entropy of transitions per window:")
        for w in result["entropy_windows"]:
            console.print(
                f"  {w['moves']:>6} moves  {w['entropy']:.3f}  {hbar(w['entropy'] / 4, 30)}"
            )
    c = result["consistency"]
    if c is not None:
        console.print(
            f"consistency score {c['score']:.3f} — {c['consistent']}/{c['agents']} agents"
            f" (verified {c['verified']}, legal state {c['legal_state']},"
            f" tiers agree {c['tiers_agree']}/{c['tiered']})"
        )
    r = result["recovery"]
    if r is not None:
        verdict = (
            ""
            if r["objective_seconds"] is None
            else (" [green]✓ within[/]" if r["met"] else " [bold red]✗ over[/]")
            + f" the objective of {duration(r['objective_seconds'])}"
        )
        console.print(
            f"recovery: open {duration(r['open_seconds'])} + {duration(r['intercept_seconds'])}"
            f" + {r['seconds_per_event'] * 1e6:.1f} µs/event replayed · measured RTO"
            f" {duration(r['measured_rto_seconds'])} · predicted RTO"
            f" {duration(r['predicted_rto_seconds'])}{verdict}"
        )
    k = result["checkpoint"]
    if k is not None:
        console.print(
            f"optimal snapshot interval: every {k['young_interval_events']} events (Young),"
            f" {k['daly_interval_events']} (Daly); the store uses {k['current_snapshot_every']}"
        )
    elif asked_interval:
        # asked for with --mtbf, but the loads timed show no cost per replayed event
        # (too few events since the snapshots, or timings lost in noise): say so
        console.print(
            "optimal snapshot interval: not computed: the timed loads show no cost per"
            " replayed event (too few events since the last snapshots to measure)"
        )
