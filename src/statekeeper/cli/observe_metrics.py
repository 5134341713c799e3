"""``statekeeper metrics``: record live metrics over a period (``record``), plot them or
a store's recorded activity (``plot``), and serve a store's content metrics
(``serve``). See :mod:`statekeeper.observability`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import ConfigurationError
from . import render
from ._markup import escape
from .app import (
    DbOption,
    JsonOption,
    KeyFileOption,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)

if TYPE_CHECKING:
    from ..observability.health import HealthReport
    from ..observability.recording import Source

metrics_app = typer.Typer(
    name="metrics", help="Prometheus metrics of a store.", no_args_is_help=True
)


def _source(
    ctx: typer.Context,
    source: str,
    key_file: Any,
    token_file: Path | None,
    name: str | None,
    state_names: bool = False,
) -> Source:
    """A /metrics URL, or a store whose contents are scanned for each sample (its
    states labelled as ``metrics serve`` labels them: ``state_names`` is
    ``--state-labels``)."""
    from ..backends.redact import mask_url
    from ..observability.recording import exporter_source, http_source

    if source.lower().startswith(("http://", "https://")):
        token = None
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigurationError(f"cannot read --token-file: {exc.strerror}") from None
        return http_source(source, token=token)
    if token_file is not None:
        raise typer.BadParameter("only for a /metrics URL", param_hint="'--token-file'")
    from ..observability.exposition import state_label
    from ..observability.health import health_report

    url = resolve_url(ctx, source)
    labels: list[Callable[[str], str]] = [str]  # the store's, set by each scan

    async def scan() -> HealthReport:
        async with open_store(url, key_file=key_file) as store:
            labels[0] = state_label(store.codec, names=state_names)
            return _readable(await health_report(store))

    return exporter_source(
        scan, name=name or "store", shown=mask_url(url), state_label=lambda s: labels[0](s)
    )


def _readable(report: HealthReport) -> HealthReport:
    """``report``, unless no agent of a non-empty store could be read (the wrong key, say):
    that is refused, not shown as "0 agents"."""
    if report.unreadable and report.agents == 0:
        agent_id, error = report.unreadable[0]
        raise ConfigurationError(
            f"none of the store's {len(report.unreadable)} agent(s) could be read "
            f"(wrong or missing key?); {agent_id!r}: {error}"
        )
    return report


@metrics_app.command("record")
@handled
def metrics_record(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="A /metrics URL (a worker's start_http_server, 'serve --metrics'), or a"
            " store URL or SQLite path (its contents, as 'metrics serve' shows them).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", metavar="FILE", help="The recording to append to (JSON Lines)."),
    ],
    every: Annotated[
        str,
        typer.Option("--every", metavar="SECONDS", help="Time between samples (30, 15s, 1m)."),
    ] = "15s",
    for_: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="DURATION",
            help="Stop after this long (90s, 10m, 1h30m) [default: at Ctrl-C].",
            show_default=False,
        ),
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option("--samples", metavar="N", min=1, help="Stop after N samples."),
    ] = None,
    key_file: KeyFileOption = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            metavar="FILE",
            help="Send the token in FILE as 'Authorization: Bearer' (the inspector's /metrics).",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="The 'store' label of a store SOURCE.")
    ] = None,
    state_labels: Annotated[
        bool,
        typer.Option(
            "--state-labels",
            help="An encrypted store SOURCE: record its agents by state name (default: by a"
            " keyed hash of each name, as 'metrics serve' labels them).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Record live metrics over a period: read SOURCE every --every seconds and
    append each sample to FILE (one JSON line: time, counters, gauges, histogram
    buckets) until --for has passed, --samples were taken, or Ctrl-C. An existing
    recording is continued. Plot it with 'metrics plot --from FILE'."""
    from ..observability.recording import parse_duration, record

    interval = parse_duration(every, "--every")
    period = parse_duration(for_, "--for") if for_ is not None else None
    if period is not None and samples is not None:
        raise typer.BadParameter("give --for or --samples, not both", param_hint="'--samples'")
    src = _source(ctx, source, key_file, token_file, name, state_labels)
    until = (
        f"for {for_}" if for_ is not None else f"{samples} sample(s)" if samples else "until Ctrl-C"
    )

    def started(n: int, _: float) -> None:  # once the first sample is in: it works
        if n == 1 and not json_out:
            out_console().print(
                f"recording {src.name} every {interval:g} s into {out}, {until}", markup=False
            )

    done = record(src, out, every=interval, duration=period, samples=samples, on_sample=started)
    if json_out:
        render.print_json(done.to_dict())
        return
    failed = f" ({done.failed} failed: the source did not answer)" if done.failed else ""
    stop = " — stopped by Ctrl-C" if done.interrupted else ""
    out_console().print(f"recorded {done.samples} sample(s) into {out}{failed}{stop}", markup=False)


@metrics_app.command("plot")
@handled
def metrics_plot(
    ctx: typer.Context,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="The picture to write (.svg or .png) [required without --from; with"
            " --from, default: draw in the terminal].",
            show_default=False,
        ),
    ] = None,
    from_: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="Plot a recording of 'metrics record' (live metrics) instead of the"
            " store's history.",
        ),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            metavar="NAME",
            help="With --from: a metric to plot, a panel each (repeat; PromQL label"
            " matchers in braces choose series) [default: save/load latency, appends,"
            " conflicts, cache hit ratio, write-buffer depth and age].",
            show_default=False,
        ),
    ] = None,
    quantile: Annotated[
        list[float] | None,
        typer.Option(
            "--quantile",
            metavar="Q",
            min=0.0,
            max=1.0,
            help="With --from: histogram quantiles to draw (repeat) [default: 0.5 0.95 0.99].",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="TIME", help="Start of the period.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="TIME", help="End of the period.")
    ] = None,
    step: Annotated[
        float | None,
        typer.Option(
            "--step",
            metavar="SECONDS",
            min=0.001,
            help="Seconds per point [default: the period in 120 points, at least 1 s].",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Plot a store's activity over a period from its recorded history: events and
    transitions per second, active agents, agents by state, entropy of the moves.
    With --from FILE, plot recorded live metrics instead: counters as rates per
    second, gauges as they are, histograms as quantiles per interval."""
    from .observe_plots import check_picture_paths
    from .times import parse_time as _parse_time

    check_picture_paths(out)
    start = _parse_time(since, "--since") if since is not None else None
    end = _parse_time(until, "--until") if until is not None else None
    if from_ is not None:
        if step is not None:
            raise typer.BadParameter("applies to a store's history, not to --from")
        _plot_recording(from_, out, metric, quantile, start, end, json_out)
        return
    for flag, given in (("--metric", metric), ("--quantile", quantile)):
        if given:
            raise typer.BadParameter("only with --from FILE", param_hint=f"'{flag}'")
    if out is None:
        raise typer.BadParameter(
            "is required (or plot a recording of live metrics with --from FILE)",
            param_hint="'--out'",
        )
    from ..observability.analysis.series import activity_series
    from ..observability.pictures import write_time_series

    url = resolve_url(ctx, db)

    forgotten: list[str] = []

    async def go() -> Any:
        async with open_store(url, key_file=key_file) as store:
            return await activity_series(store, step, since=start, until=end, forgotten=forgotten)

    series = run(go())
    if not series.starts:
        raise ConfigurationError("nothing to plot: no events recorded in the period")
    write_time_series(series, out)
    if json_out:
        render.print_json({"picture": str(out), **series.to_dict(), "forgotten": forgotten})
    else:
        out_console().print(
            f"wrote {out}: {len(series.starts)} points of {series.step:g} s,"
            f" {sum(series.events)} events, {sum(series.transitions)} transitions"
        )
        if forgotten:
            out_console().print(
                f"left out {len(forgotten)} forgotten agent(s) (their data keys are"
                f" destroyed): {escape(', '.join(forgotten))}"
            )


def _plot_recording(
    path: Path,
    out: Path | None,
    metrics: list[str] | None,
    quantiles: list[float] | None,
    since: float | None,
    until: float | None,
    json_out: bool,
) -> None:
    from ..observability.series import load_recording, metric_series

    series = metric_series(
        load_recording(path), metrics, quantiles=quantiles, since=since, until=until
    )
    if out is not None:
        from ..observability.pictures import write_metric_series

        write_metric_series(series, out)
    if json_out:
        render.print_json({"picture": str(out) if out else None, **series.to_dict()})
        return
    console = out_console()
    if out is not None:
        console.print(
            f"wrote {out}: {len(series.panels)} panel(s), {len(series.times)} samples",
            markup=False,
        )
        return
    from .metric_charts import series_renderables

    for item in series_renderables(series, console.width):
        console.print(item)


@metrics_app.command("serve")
@handled
def metrics_serve(
    ctx: typer.Context,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")
    ] = 9464,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    interval: Annotated[
        float,
        typer.Option("--interval", metavar="SECONDS", min=0, help="Rescan at most this often."),
    ] = 30.0,
    name: Annotated[str | None, typer.Option("--name", help="The 'store' label.")] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Scan once, print the metrics (text format) and exit: for node_exporter's"
            " textfile collector or a cron job.",
        ),
    ] = False,
    state_labels: Annotated[
        bool,
        typer.Option(
            "--state-labels",
            help="On an encrypted store, label statekeeper_agents_in_state with the state"
            " names themselves (default: a keyed hash of each name, so the unauthenticated"
            " endpoint and the scrapes hold no name).",
        ),
    ] = False,
) -> None:
    """Serve the store's content metrics (agents by state, stuck agents, due snapshots,
    stale leases, largest state) on http://HOST:PORT/metrics until interrupted."""
    import threading

    from prometheus_client import CollectorRegistry

    from ..observability.exposition import StoreExporter, start_http_server, state_label
    from ..observability.health import health_report

    url = resolve_url(ctx, db)

    async def scan() -> HealthReport:
        async with open_store(url, key_file=key_file) as store:
            exporter.state_label = state_label(store.codec, names=state_labels)
            return await health_report(store)

    registry = CollectorRegistry()
    exporter = StoreExporter(scan, name=name or "store", interval=interval)
    first = exporter.report()
    if first is None:  # fail now, not on the first scrape
        run(scan())
        raise ConfigurationError("the store could not be scanned")
    _readable(first)
    registry.register(exporter)
    if once:
        import sys

        from prometheus_client import generate_latest

        sys.stdout.write(generate_latest(registry).decode())
        return
    server, _ = start_http_server(port, host, registry)
    out_console().print(
        f"serving metrics on http://{host}:{server.server_port}/metrics (Ctrl-C stops)"
    )
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
