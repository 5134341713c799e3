"""Recording live metrics over a period (``statekeeper metrics record``): samples from a
real metrics HTTP server while a store writes, on an injected clock (no sleeping), the
sampling grid, resuming, Ctrl-C, failures, and the bad sources, files and durations."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from statekeeper import StateStore, SyncStateStore
from statekeeper.cli import app
from statekeeper.errors import BackendUnavailable, ConfigurationError, InvalidArgument
from statekeeper.observability import instrument, start_http_server
from statekeeper.observability.health import health_report
from statekeeper.observability.recording import (
    Source,
    exporter_source,
    http_source,
    parse_duration,
    record,
)
from statekeeper.observability.series import load_recording, metric_series

from ..conftest import FakeClock

START = 1_796_205_600.0  # 2026-12-02 10:00 UTC
APPENDS = 'statekeeper_appends_total{backend="memory",store="w"}'


class Sleeper:
    """An injected sleep: moves the fake clock on by the time asked for, and runs
    ``between`` (the work done while the recorder waits); ``stop_after`` raises
    KeyboardInterrupt on that call, as Ctrl-C would."""

    def __init__(self, clock: FakeClock, between: Any = None, stop_after: int = 0) -> None:
        self.clock, self.between, self.stop_after = clock, between, stop_after
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if self.stop_after and len(self.calls) >= self.stop_after:
            raise KeyboardInterrupt
        self.clock.advance(seconds)
        if self.between is not None:
            self.between()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _counter_source(reads: list[int] | None = None, fail_on: int = 0) -> Source:
    count = [0]

    def read() -> str:
        count[0] += 1
        if count[0] == fail_on:
            raise BackendUnavailable("cannot read http://w/metrics: connection refused")
        if reads is not None:
            reads.append(count[0])
        return f"# TYPE jobs counter\njobs_total {count[0]}\n"

    return Source("test", read)


async def test_records_samples_from_a_served_store_while_it_writes(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    out = tmp_path / "rec.jsonl"
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, name="w", tracing=False)
        await store.save("a", {"n": 0})
        server, thread = start_http_server(0, "127.0.0.1", registry)
        loop = asyncio.get_running_loop()
        clock = FakeClock(START)

        def two_saves() -> None:  # while the recorder waits, the store writes twice
            async def work() -> None:
                for agent in ("a", "b"):
                    await store.save(agent, {"n": clock.now})

            asyncio.run_coroutine_threadsafe(work(), loop).result(timeout=60)

        source = http_source(f"http://127.0.0.1:{server.server_port}/metrics")
        try:
            done = await asyncio.to_thread(
                record,
                source,
                out,
                every="15s",
                samples=5,
                clock=clock,
                sleep=Sleeper(clock, two_saves),
            )
        finally:
            server.shutdown()
            thread.join(timeout=10)
    assert (done.samples, done.failed, done.interrupted) == (5, 0, False)
    lines = _lines(out)
    assert [line["t"][11:19] for line in lines] == [
        "10:00:00",
        "10:00:15",
        "10:00:30",
        "10:00:45",
        "10:01:00",
    ]
    assert [line["metrics"][APPENDS] for line in lines] == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert lines[0]["types"]["statekeeper_operation_duration_seconds"] == "histogram"
    bucket = 'statekeeper_operation_duration_seconds_bucket{backend="memory",le="+Inf",'
    assert lines[-1]["metrics"][bucket + 'operation="save",store="w"}'] == 9.0
    assert not any(k.endswith("_created") for k in lines[0]["metrics"])
    series = metric_series(load_recording(out))
    appends = next(p for p in series.panels if p.metric == "statekeeper_appends")
    assert appends.lines[0].values == (None, *[pytest.approx(2 / 15)] * 4)
    latency = next(p for p in series.panels if p.kind == "quantile")
    saves = {ln.label: ln.values for ln in latency.lines if ln.label.endswith("=save")}
    assert set(saves) == {"p50 operation=save", "p99 operation=save"}
    # two saves in every interval: a latency each time, p99 at least p50
    assert all(v is not None and v > 0 for values in saves.values() for v in values[1:])
    p50, p99 = saves["p50 operation=save"], saves["p99 operation=save"]
    assert all(b >= a for a, b in zip(p50[1:], p99[1:], strict=True))  # type: ignore[operator]


def test_a_duration_samples_on_a_grid_and_skips_slots_a_slow_read_missed(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START)
    done = record(
        _counter_source(),
        tmp_path / "a.jsonl",
        every=15,
        duration="1m",
        clock=clock,
        sleep=Sleeper(clock),
    )
    assert done.samples == 5  # at 0, 15, 30, 45 and 60 s
    assert [ln["t"][14:19] for ln in _lines(tmp_path / "a.jsonl")] == [
        "00:00",
        "00:15",
        "00:30",
        "00:45",
        "01:00",
    ]
    # every read takes 20 s of a 15 s interval: the next sample is at the next slot
    clock = FakeClock(START)

    def slow() -> str:
        clock.advance(20)
        return "# TYPE jobs counter\njobs_total 1\n"

    done = record(
        Source("slow", slow),
        tmp_path / "b.jsonl",
        every=15,
        duration=60,
        clock=clock,
        sleep=Sleeper(clock),
    )
    assert [ln["t"][14:19] for ln in _lines(tmp_path / "b.jsonl")] == ["00:00", "00:30", "01:00"]


def test_a_recording_is_resumed_and_a_torn_line_cut(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    clock = FakeClock(START)
    record(_counter_source(), out, every=10, samples=2, clock=clock, sleep=Sleeper(clock))
    with out.open("a") as f:
        f.write('{"t": "2026-12-02T10:00:20+00:00", "metr')  # killed mid-write
    clock.advance(10)
    record(_counter_source(), out, every=10, samples=2, clock=clock, sleep=Sleeper(clock))
    lines = _lines(out)  # every line whole
    assert [ln["metrics"]["jobs_total"] for ln in lines] == [1.0, 2.0, 1.0, 2.0]
    assert len(load_recording(out).times) == 4


def test_ctrl_c_ends_the_recording_with_every_sample_kept(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    clock = FakeClock(START)
    done = record(_counter_source(), out, every=10, clock=clock, sleep=Sleeper(clock, None, 3))
    assert done.interrupted and done.samples == 3 and len(_lines(out)) == 3


def test_a_gauge_without_a_value_is_a_gap(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    values = iter(["1", "NaN", "3"])

    def read() -> str:
        return f"# TYPE depth gauge\ndepth {next(values)}\n"

    clock = FakeClock(START)
    record(Source("nan", read), out, every=1, samples=3, clock=clock, sleep=Sleeper(clock))
    series = metric_series(load_recording(out), ["depth"])
    assert series.panels[0].lines[0].values == (1.0, None, 3.0)


def test_a_later_failure_is_a_gap_not_the_end(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    clock = FakeClock(START)
    done = record(
        _counter_source(fail_on=2), out, every=10, samples=4, clock=clock, sleep=Sleeper(clock)
    )
    assert (done.samples, done.failed) == (3, 1)
    assert "connection refused" in _lines(out)[1]["error"]
    rec = load_recording(out)
    assert rec.failed == 1 and len(rec.times) == 3
    # the rate over the gap: from 1 (at 0 s) to 3 (at 20 s)
    assert metric_series(rec, ["jobs"]).panels[0].lines[0].values == (None, 0.1, 0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _http(
    body: str, *, status: int = 200, token: str | None = None, basic: str | None = None
) -> Iterator[str]:
    """A server answering every GET with ``body`` (401 without ``token``, if given, or
    without the basic credentials ``basic`` ("user:password"), if given)."""
    wanted = f"Bearer {token}" if token is not None else None
    if basic is not None:
        wanted = "Basic " + base64.b64encode(basic.encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if wanted is not None and self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.end_headers()
                return
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


HTML = "<!DOCTYPE html>\n<html><body><h1>Welcome</h1></body></html>\n"


def test_bad_sources_are_typed_errors_naming_them(tmp_path: Path) -> None:
    out = tmp_path / "rec.jsonl"
    url = f"http://user:s3cret@127.0.0.1:{_free_port()}/metrics"
    with pytest.raises(BackendUnavailable) as err:
        record(http_source(url), out, every=1, samples=1)
    assert "cannot read http://user:" in str(err.value) and "s3cret" not in str(err.value)
    assert not out.exists()  # nothing recorded, no file left
    with _http(HTML) as html, pytest.raises(ConfigurationError) as bad:
        record(http_source(html), out, every=1, samples=1)
    assert "did not answer in the Prometheus text format" in str(bad.value)
    assert "<!DOCTYPE html>" in str(bad.value)
    with _http("") as empty, pytest.raises(ConfigurationError, match="answered with no metrics"):
        record(http_source(empty), out, every=1, samples=1)
    with _http(HTML, status=404) as missing, pytest.raises(ConfigurationError, match="HTTP 404"):
        record(http_source(missing), out, every=1, samples=1)
    with pytest.raises(InvalidArgument, match="not an http"):
        http_source("ftp://example.org/metrics")
    # the inspector's /metrics wants its token
    with _http("# TYPE up gauge\nup 1\n", token="t0ken") as guarded:
        with pytest.raises(ConfigurationError, match="HTTP 401"):
            record(http_source(guarded), out, every=1, samples=1)
        record(http_source(guarded, token="t0ken"), out, every=1, samples=1)
    assert _lines(out)[0]["metrics"] == {"up": 1.0}


def test_a_refused_token_and_credentials_in_the_url_are_said_as_they_are(
    tmp_path: Path,
) -> None:
    """A wrong --token-file was answered "(the inspector wants --token-file)", though one
    was given: it says the token was refused. A ``user:password@host`` URL was answered
    "Name or service not known" (urllib looked ``user:password@host`` up in DNS): the
    credentials are sent as HTTP basic authentication, and a host that does not resolve
    is said to be one. The password is never shown."""
    out = tmp_path / "rec.jsonl"
    with _http("# TYPE up gauge\nup 1\n", token="t0ken") as guarded:
        with pytest.raises(ConfigurationError) as wrong:
            record(http_source(guarded, token="not-it"), out, every=1, samples=1)
        assert "HTTP 401" in str(wrong.value) and "token given with --token-file was refused" in (
            str(wrong.value)
        )
        assert "not-it" not in str(wrong.value)
        with pytest.raises(ConfigurationError, match="wants credentials"):
            record(http_source(guarded), out, every=1, samples=1)
    with _http("# TYPE up gauge\nup 1\n", basic="me:pa:ss@w") as plain:
        url = plain.replace("http://", "http://me:pa%3Ass%40w@")
        record(http_source(url), out, every=1, samples=1)
        assert _lines(out)[-1]["metrics"] == {"up": 1.0}
        bad = plain.replace("http://", "http://me:s3cret@")
        with pytest.raises(ConfigurationError) as refused:
            record(http_source(bad), out, every=1, samples=1)
        assert "user and password in the URL were refused" in str(refused.value)
        assert "s3cret" not in str(refused.value)
        with pytest.raises(InvalidArgument, match="not both"):
            http_source(bad, token="t0ken")
    with pytest.raises(BackendUnavailable) as dns:
        record(
            http_source("http://me:s3cret@no-such-host.invalid/metrics"), out, every=1, samples=1
        )
    assert "'no-such-host.invalid' did not resolve" in str(dns.value)
    assert "s3cret" not in str(dns.value)


def test_bad_durations_counts_and_files_are_refused(tmp_path: Path) -> None:
    assert parse_duration("1h30m", "for") == 5400.0
    assert parse_duration("500ms", "every") == 0.5
    assert parse_duration("45", "every") == 45.0
    for bad in ("soon", "0", "-5s", "1x", "", "inf"):
        with pytest.raises(InvalidArgument, match="every must be a"):
            parse_duration(bad, "every")
    out = tmp_path / "rec.jsonl"
    source = _counter_source()
    with pytest.raises(InvalidArgument, match="not both"):
        record(source, out, every=1, duration=10, samples=3)
    with pytest.raises(InvalidArgument, match="positive integer"):
        record(source, out, every=1, samples=0)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(InvalidArgument, match="something else than a metrics recording"):
        record(source, notes, every=1, samples=1)
    assert notes.read_text() == "my notes\n"  # untouched
    with pytest.raises(InvalidArgument, match="no such directory"):
        record(source, tmp_path / "no" / "rec.jsonl", every=1, samples=1)


async def test_a_store_is_sampled_for_its_contents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, witness=False) as store:
        await store.save("a-0", {"n": 0})

    async def scan() -> Any:
        async with StateStore(url, witness=False) as store:
            return await health_report(store)

    clock = FakeClock(START)
    written = [0]

    def another_agent() -> None:  # between samples, another process adds an agent
        written[0] += 1
        with SyncStateStore(url, witness=False) as s:
            s.save(f"a-{written[0]}", {"n": written[0]})

    out = tmp_path / "rec.jsonl"
    await asyncio.to_thread(
        record,
        exporter_source(scan, name="main"),
        out,
        every=60,
        samples=3,
        clock=clock,
        sleep=Sleeper(clock, another_agent),
    )
    agents = [ln["metrics"]['statekeeper_agents{store="main"}'] for ln in _lines(out)]
    assert agents == [1.0, 2.0, 3.0]


def test_cli_records_and_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "rec.jsonl"
    with _http("# TYPE jobs counter\njobs_total 7\n") as url:
        result = runner.invoke(app, ["metrics", "record", url, "--samples", "1", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "recorded 1 sample(s)" in result.stdout
        result = runner.invoke(
            app, ["metrics", "record", url, "--every", "soon", "--out", str(out)]
        )
        assert result.exit_code == 2 and "--every must be a positive duration" in result.output
        result = runner.invoke(
            app, ["metrics", "record", url, "--for", "1m", "--samples", "2", "--out", str(out)]
        )
        assert result.exit_code == 2 and "not both" in result.output
    assert _lines(out)[0]["metrics"] == {"jobs_total": 7.0}
    gone = f"http://127.0.0.1:{_free_port()}/metrics"
    result = runner.invoke(app, ["metrics", "record", gone, "--samples", "1", "--out", str(out)])
    assert result.exit_code == 2 and "cannot read http://127.0.0.1" in result.output
    with _http(HTML) as html:
        result = runner.invoke(
            app, ["metrics", "record", html, "--samples", "1", "--out", str(out), "--json"]
        )
    assert result.exit_code == 2 and "Prometheus text format" in result.output
    assert "Traceback" not in result.output
    assert len(_lines(out)) == 1  # nothing lost, nothing added
    # a store as the source: its contents, as `metrics serve --once` shows them
    db = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{db}", witness=False) as s:
        s.save("a", {"n": 1})
    store_out = tmp_path / "store.jsonl"
    result = runner.invoke(
        app, ["metrics", "record", str(db), "--samples", "1", "--out", str(store_out), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples"] == 1
    assert _lines(store_out)[0]["metrics"]['statekeeper_agents{store="store"}'] == 1.0


def test_cli_token_file_opens_the_inspectors_metrics(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "rec.jsonl"
    token = tmp_path / "token"
    token.write_text("a-long-inspector-token\n")
    with _http("# TYPE up gauge\nup 1\n", token="a-long-inspector-token") as url:
        args = ["metrics", "record", url, "--samples", "1", "--out", str(out)]
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "HTTP 401" in result.output
        result = runner.invoke(app, [*args, "--token-file", str(token)])
        assert result.exit_code == 0, result.output
    assert "a-long-inspector-token" not in result.output
    assert _lines(out)[0]["metrics"] == {"up": 1.0}


def test_ctrl_c_stops_the_cli_cleanly_with_the_samples_kept(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from ..cli._proc import cli_env, ctrl_c_reaches_it

    out = tmp_path / "rec.jsonl"
    with _http("# TYPE jobs counter\njobs_total 3\n") as url:
        argv = ["metrics", "record", url, "--every", "10ms", "--out", str(out)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "statekeeper.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a run that hangs is ended by SIGABRT: faulthandler prints every thread's stack
            env={**cli_env(), "PYTHONFAULTHANDLER": "1"},
            preexec_fn=ctrl_c_reaches_it,  # (the suite may run with SIGINT ignored)
        )
        try:
            deadline = time.monotonic() + 120  # a bound on a hung run, not a timing
            while not (out.exists() and out.read_text().count("\n") >= 2):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no samples recorded"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGINT)
            try:
                stdout, stderr = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:  # (seen once in CI, stop 40): show where
                proc.send_signal(signal.SIGABRT)
                _, stuck = proc.communicate(timeout=60)
                raise AssertionError(f"no exit 120 s after Ctrl-C; its threads:\n{stuck}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr
    assert "stopped by Ctrl-C" in stdout and "Traceback" not in stderr
    lines = _lines(out)  # every line whole
    assert len(lines) >= 2 and all(ln["metrics"] == {"jobs_total": 3.0} for ln in lines)
    assert f"recorded {len(lines)} sample(s)" in stdout
