"""Series of recorded live metrics (``metrics plot --from FILE``): counter rates with
resets, gauges, histogram quantiles per interval (Prometheus' ``histogram_quantile``)
and the cache hit ratio, hand-computed on a fixed recording; the pictures and the
terminal rendering; bad recordings and unknown metrics."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app
from statekeeper.errors import InvalidArgument
from statekeeper.observability.series import (
    CACHE_HIT_RATIO,
    histogram_quantile,
    load_recording,
    metric_series,
    parse_selector,
)

SVG = "{http://www.w3.org/2000/svg}"
INF = math.inf


def _h(le: str, n: float, op: str = "a") -> tuple[str, float]:
    return f'req_seconds_bucket{{le="{le}",op="{op}"}}', n


def _sample(
    t: str, buckets: tuple[float, float, float, float], jobs: float, depth: float, hm: Any
) -> str:
    b = dict(_h(le, n) for le, n in zip(("0.1", "0.5", "1.0", "+Inf"), buckets, strict=True))
    metrics = {
        **b,
        'req_seconds_count{op="a"}': buckets[-1],
        'req_seconds_sum{op="a"}': 0.0,
        'jobs_total{store="w"}': jobs,
        'depth{store="w"}': depth,
        'statekeeper_cache_hits_total{store="w"}': hm[0],
        'statekeeper_cache_misses_total{store="w"}': hm[1],
    }
    types = {
        "req_seconds": "histogram",
        "jobs": "counter",
        "depth": "gauge",
        "statekeeper_cache_hits": "counter",
        "statekeeper_cache_misses": "counter",
    }
    return json.dumps({"t": t, "metrics": metrics, "types": types})


#: four samples 10 s apart and a failed scrape between the last two:
#: histogram buckets (cumulative, le 0.1 / 0.5 / 1 / +Inf), a counter that resets,
#: a gauge, cache hits and misses
RECORDING = (
    "\n".join(
        [
            _sample("2026-12-02T10:00:00+00:00", (0, 0, 0, 0), 100, 3, (0, 0)),
            _sample("2026-12-02T10:00:10+00:00", (2, 6, 8, 10), 130, 5, (3, 1)),
            _sample("2026-12-02T10:00:20+00:00", (2, 6, 8, 10), 10, 4, (3, 1)),
            json.dumps({"t": "2026-12-02T10:00:25+00:00", "error": "cannot read http://x"}),
            _sample("2026-12-02T10:00:30+00:00", (12, 16, 28, 30), 40, 0, (9, 5)),
        ]
    )
    + "\n"
)


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "rec.jsonl"
    path.write_text(RECORDING)
    return path


def _lines(series: Any, metric: str) -> dict[str, tuple[float | None, ...]]:
    panel = next(p for p in series.panels if p.metric == metric)
    return {ln.label: ln.values for ln in panel.lines}


def test_histogram_quantile_is_prometheus_bucket_interpolation() -> None:
    # 10 observations: 2 <= 0.1, 4 in (0.1, 0.5], 2 in (0.5, 1], 2 above 1
    buckets = [(0.1, 2.0), (0.5, 6.0), (1.0, 8.0), (INF, 10.0)]
    # p50: rank 5, in (0.1, 0.5] holding 4, 3 into it: 0.1 + 0.4 * 3/4
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.4)
    # p10: rank 1 in the lowest bucket, which starts at 0: 0.1 * 1/2
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.05)
    # p95: rank 9.5 falls in +Inf: the highest finite bound
    assert histogram_quantile(0.95, buckets) == 1.0
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None  # no observations
    assert histogram_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]) is None  # no +Inf bucket
    # a bucket lower than the one before (scraped mid-update) is raised to it
    assert histogram_quantile(0.5, [(0.1, 4.0), (0.5, 3.0), (INF, 4.0)]) == pytest.approx(0.05)


def test_rates_gauges_quantiles_and_hit_ratio_from_a_fixed_recording(recording: Path) -> None:
    rec = load_recording(recording)
    assert rec.failed == 1 and len(rec.times) == 4
    s = metric_series(
        rec,
        ["jobs", "depth", "req_seconds", CACHE_HIT_RATIO, "req_seconds_count"],
    )
    assert s.times == tuple(rec.times)
    # counter: increase per second; 130 -> 10 is a reset, its increase is 10
    assert _lines(s, "jobs") == {"per second": (None, 3.0, 1.0, 3.0)}
    assert _lines(s, "depth") == {"value": (3.0, 5.0, 4.0, 0.0)}
    q = _lines(s, "req_seconds")
    # interval 1: the buckets' increases are (2, 6, 8, 10); interval 2: none (no
    # observation: no value); interval 3: (10, 10, 20, 20) -> p50 rank 10 at the top
    # of the first bucket, p95 rank 19: 0.5 + 0.5 * 9/10, p99 rank 19.8: 0.5 + 0.5 * 9.8/10
    assert q["p50"] == pytest.approx((None, 0.4, None, 0.1))
    assert q["p95"] == pytest.approx((None, 1.0, None, 0.95))
    assert q["p99"] == pytest.approx((None, 1.0, None, 0.99))
    # hits / (hits + misses) of each interval's increases (none in the second)
    assert _lines(s, CACHE_HIT_RATIO) == {"hit ratio": (None, 0.75, None, 0.6)}
    # a histogram's _count as a rate: observations per second
    assert _lines(s, "req_seconds_count") == {"per second": (None, 1.0, 0.0, 2.0)}


def test_selectors_labels_quantiles_and_period(recording: Path) -> None:
    rec = load_recording(recording)
    s = metric_series(rec, ['req_seconds{op=~"a|b"}:0.5'], since=rec.times[1])
    assert _lines(s, 'req_seconds{op=~"a|b"}') == {"p50": (None, None, 0.1)}
    s = metric_series(rec, ["req_seconds"], quantiles=[0.1])
    # interval 3: 20 observations, rank 2 of the 10 in the lowest bucket: 0.1 * 2/10
    assert _lines(s, "req_seconds") == {"p10": pytest.approx((None, 0.05, None, 0.02))}
    assert parse_selector('x{a="1",b!~"c.*"}').matches({"a": "1", "b": "d"})
    with pytest.raises(InvalidArgument, match=r"no series of 'req_seconds' match.*op: a"):
        metric_series(rec, ['req_seconds{op="zzz"}'])
    with pytest.raises(InvalidArgument, match="bad regular expression"):
        parse_selector('x{a=~"("}')


def test_the_default_panels_are_those_recorded(recording: Path) -> None:
    s = metric_series(load_recording(recording))
    # of the defaults (latency, appends, conflicts, hit ratio, write buffer) only the
    # hit ratio was recorded
    assert [p.metric for p in s.panels] == [CACHE_HIT_RATIO]


def test_an_unknown_metric_names_the_recorded_ones(recording: Path) -> None:
    with pytest.raises(InvalidArgument) as err:
        metric_series(load_recording(recording), ["statekeeper_nope"])
    assert "'statekeeper_nope'" in str(err.value)
    assert "recorded: depth, jobs, req_seconds, statekeeper_cache_hit_ratio" in str(err.value)


def test_bad_recordings_are_refused_by_name(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InvalidArgument, match="holds no samples"):
        load_recording(empty)
    with pytest.raises(InvalidArgument, match="no such recording"):
        load_recording(tmp_path / "missing.jsonl")
    other = tmp_path / "notes.txt"
    for text in ("hello\n", "no newline at the end"):
        other.write_text(text)
        with pytest.raises(InvalidArgument, match="line 1 is not a metrics sample"):
            load_recording(other)
    one = tmp_path / "one.jsonl"
    one.write_text(RECORDING.splitlines()[0] + "\n")
    with pytest.raises(InvalidArgument, match="rates need two"):
        metric_series(load_recording(one))


def test_a_torn_last_line_is_passed_over(recording: Path) -> None:
    with recording.open("a") as f:
        f.write('{"t": "2026-12-02T10:00:40+00:00", "metr')  # killed mid-write
    assert len(load_recording(recording).times) == 4


def _svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")]


def test_cli_plots_a_recording_as_svg_png_json_and_in_the_terminal(
    recording: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import image

    runner = CliRunner()
    svg = tmp_path / "m.svg"
    args = ["metrics", "plot", "--from", str(recording), "--metric", "req_seconds"]
    result = runner.invoke(app, [*args, "--metric", "jobs", "--out", str(svg)])
    assert result.exit_code == 0, result.output
    assert "2 panel(s), 4 samples" in " ".join(result.stdout.split())
    texts = " ".join(_svg_texts(svg))
    assert "req_seconds — p50, p95, p99 per interval" in texts
    assert "jobs_total — rate per second" in texts
    png = tmp_path / "m.png"
    assert runner.invoke(app, [*args, "--out", str(png)]).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(png).shape[1] > 300  # decodes whole
    result = runner.invoke(app, [*args, "--quantile", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["failed_samples"] == 1 and doc["picture"] is None
    assert doc["panels"][0]["lines"] == [{"label": "p50", "values": [None, 0.4, None, 0.1]}]
    result = runner.invoke(app, [*args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "4 samples, 1 failed, 2026-12-02 10:00:00 → 2026-12-02 10:00:30 UTC" in result.stdout
    headers = [ln.split()[:3] for ln in result.stdout.splitlines() if "over time" in ln]
    assert headers and all(h == ["series", "over", "time"] for h in headers)  # not "s…"
    row = next(ln for ln in result.stdout.splitlines() if ln.startswith("p50"))
    assert row.split()[-6:] == ["100", "ms", "400", "ms", "100", "ms"]  # min, max, last


def test_cli_refuses_bad_plot_arguments(recording: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["metrics", "plot", "--from", str(recording), "--metric", "statekeeper_nope"]
    )
    assert result.exit_code == 2
    assert "no metric 'statekeeper_nope'" in result.output and "req_seconds" in result.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = runner.invoke(app, ["metrics", "plot", "--from", str(empty)])
    assert result.exit_code == 2 and "holds no samples" in result.output
    result = runner.invoke(app, ["metrics", "plot", "--db", "x.db", "--metric", "jobs"])
    assert result.exit_code == 2 and "only with --from" in result.output
    result = runner.invoke(app, ["metrics", "plot", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2 and "--out" in result.output
    assert "Traceback" not in result.output
