"""Time series of recorded live metrics (a file of :mod:`.recording`), computed the way
PromQL computes them, for ``statekeeper metrics plot --from FILE``:

* a counter as its rate per second over each interval between two samples; a value
  lower than the one before is a reset (the process restarted): the increase is then
  the new value, as ``rate()`` takes it;
* a gauge as it is;
* a histogram as quantiles per interval (``histogram_quantile(q, rate(x_bucket[...]))``):
  the bucket counts' increases over the interval, the rank ``q × observations`` found
  in the cumulative buckets and interpolated linearly inside its bucket
  (:func:`histogram_quantile`, Prometheus' ``bucketQuantile``);
* the cache hit ratio, ``hits / (hits + misses)`` of each interval's increases.

A panel per chosen metric; a line per label set (per quantile for histograms), named
by the labels that differ between its lines. A metric is chosen by a selector: a family
(``statekeeper_appends``) or sample name (``statekeeper_appends_total``,
``..._count``), with PromQL label matchers: ``x{operation=~"save|load",store="w"}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..errors import InvalidArgument

__all__ = [
    "CACHE_HIT_RATIO",
    "DEFAULT_METRICS",
    "DEFAULT_QUANTILES",
    "Line",
    "MetricSeries",
    "Panel",
    "Recording",
    "Selector",
    "histogram_quantile",
    "load_recording",
    "metric_series",
    "parse_selector",
]

#: the derived metric ``hits / (hits + misses)`` of the store's cache, per interval
CACHE_HIT_RATIO = "statekeeper_cache_hit_ratio"
DEFAULT_QUANTILES = (0.5, 0.95, 0.99)
#: what ``metrics plot --from FILE`` draws without ``--metric`` (those recorded)
DEFAULT_METRICS = (
    'statekeeper_operation_duration_seconds{operation=~"save|load"}:0.5,0.99',
    "statekeeper_appends",
    "statekeeper_conflicts",
    CACHE_HIT_RATIO,
    "statekeeper_write_buffer_depth",
    "statekeeper_write_buffer_age_seconds",
)

_KEY = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$", re.S)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
_HISTOGRAMS = frozenset({"histogram", "gaugehistogram"})


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _matchers(text: str, where: str) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise InvalidArgument(
                "metric", f'cannot read the labels of {where!r} (write name{{label="value"}})'
            )
        found.append((m.group(1), m.group(2), _unescape(m.group(3))))
        pos = m.end()
    return found


def _split_key(key: str) -> tuple[str, dict[str, str]]:
    m = _KEY.match(key)
    if m is None:
        raise ValueError(key)
    return m.group(1), {k: v for k, _, v in _matchers(m.group(2) or "", key)}


@dataclass(frozen=True)
class Selector:
    """A metric and label matchers (``(label, op, value)``, op ``=``, ``!=``, ``=~``,
    ``!~``), and the quantiles to draw if it is a histogram (None: the default)."""

    name: str
    matchers: tuple[tuple[str, str, str], ...] = ()
    quantiles: tuple[float, ...] | None = None

    def matches(self, labels: dict[str, str]) -> bool:
        for label, op, value in self.matchers:
            have = labels.get(label, "")
            if (op == "=" and have != value) or (op == "!=" and have == value):
                return False
            if op in ("=~", "!~") and (re.fullmatch(value, have) is None) == (op == "=~"):
                return False
        return True

    def __str__(self) -> str:
        inner = ",".join(f'{k}{op}"{v}"' for k, op, v in self.matchers)
        return self.name + (f"{{{inner}}}" if inner else "")


def parse_selector(text: str) -> Selector:
    """``name``, ``name{label="v",other=~"a|b"}``, optionally ``:q1,q2`` (quantiles)."""
    body, _, qs = text.strip().rpartition(":") if re.search(r":[\d.,]+$", text) else (text, "", "")
    quantiles: tuple[float, ...] | None = None
    if qs:
        try:
            quantiles = tuple(float(q) for q in qs.split(","))
        except ValueError:
            raise InvalidArgument("metric", f"bad quantiles in {text!r}") from None
        check_quantiles(quantiles)
    m = _KEY.match(body.strip())
    if m is None:
        raise InvalidArgument(
            "metric", f'{text!r} is not a metric name (optionally with {{label="value"}})'
        )
    matchers = _matchers(m.group(2) or "", text)
    for _, op, value in matchers:
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise InvalidArgument(
                    "metric", f"bad regular expression in {text!r}: {exc}"
                ) from None
    return Selector(m.group(1), tuple(matchers), quantiles)


def check_quantiles(quantiles: Iterable[float]) -> tuple[float, ...]:
    qs = tuple(quantiles)
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise InvalidArgument("quantile", f"a quantile is in [0, 1], not {q!r}")
    return qs


@dataclass(frozen=True)
class Recording:
    """The samples of a recording file, in file order (error lines left out)."""

    path: str
    times: tuple[float, ...]
    samples: tuple[dict[str, float], ...]
    #: family name -> Prometheus type, over every sample
    types: dict[str, str]
    #: lines that held an error (the source did not answer then)
    failed: int = 0

    def names(self) -> list[str]:
        """The metrics a selector may name: every family, and the derived ones."""
        names = set(self.types)
        if {"statekeeper_cache_hits", "statekeeper_cache_misses"} <= names:
            names.add(CACHE_HIT_RATIO)
        return sorted(names)


def load_recording(path: str | Path) -> Recording:
    """Read a file :func:`~.recording.record` wrote. :class:`InvalidArgument` (argument
    ``from``) for a missing or empty file or a line that is not a sample; a torn last
    line (a recording killed mid-write) is passed over."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InvalidArgument("from", f"no such recording: {str(p)!r}") from None
    except OSError as exc:
        raise InvalidArgument("from", f"cannot read {str(p)!r}: {exc.strerror}") from None
    lines = data.split(b"\n")
    if lines and lines[-1].startswith(b'{"t":'):
        lines = lines[:-1]  # a sample without its newline: torn by a kill mid-write
    times: list[float] = []
    samples: list[dict[str, float]] = []
    types: dict[str, str] = {}
    failed = 0
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
            t = datetime.fromisoformat(line["t"]).timestamp()
            if "error" in line:
                failed += 1
                continue
            # NaN and infinities are written as null: no value
            metrics = {str(k): float(v) for k, v in line["metrics"].items() if v is not None}
            types.update({str(k): str(v) for k, v in line.get("types", {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InvalidArgument(
                "from",
                f"{str(p)!r} line {number} is not a metrics sample"
                " (a file written by 'statekeeper metrics record')",
            ) from None
        times.append(t)
        samples.append(metrics)
    if not samples:
        raise InvalidArgument("from", f"{str(p)!r} holds no samples")
    order = sorted(range(len(times)), key=times.__getitem__)  # resumed runs: time order
    return Recording(
        str(p), tuple(times[i] for i in order), tuple(samples[i] for i in order), types, failed
    )


@dataclass(frozen=True)
class Line:
    label: str
    #: one value per time of the series (None: no value, e.g. no observation)
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class Panel:
    """One chosen metric: ``kind`` is ``rate`` (per second), ``gauge``, ``quantile``
    or ``ratio``."""

    metric: str
    title: str
    unit: str
    kind: str
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class MetricSeries:
    times: tuple[float, ...]
    panels: tuple[Panel, ...]
    source: str = ""
    failed: int = field(default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "recording": self.source,
            "times": [datetime.fromtimestamp(t, UTC).isoformat() for t in self.times],
            "failed_samples": self.failed,
            "panels": [
                {
                    "metric": p.metric,
                    "title": p.title,
                    "unit": p.unit,
                    "kind": p.kind,
                    "lines": [{"label": ln.label, "values": list(ln.values)} for ln in p.lines],
                }
                for p in self.panels
            ],
        }


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q``-quantile of a histogram given as cumulative ``(upper bound, count)``
    buckets, the last one ``+Inf`` — Prometheus' ``histogram_quantile``: None (NaN)
    without observations or a ``+Inf`` bucket; in the ``+Inf`` bucket, the highest
    finite bound; otherwise linear interpolation inside the bucket holding the rank
    ``q × count`` (the lowest bucket starting at 0)."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for bound, count in buckets:
        merged[bound] = merged.get(bound, 0.0) + count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    fixed: list[tuple[float, float]] = []
    top = 0.0
    for bound, count in ordered:  # counts must not fall (a scrape between updates)
        top = max(top, count)
        fixed.append((bound, top))
    observations = fixed[-1][1]
    if observations == 0:
        return None
    rank = q * observations
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, end, count = 0.0, fixed[b][0], fixed[b][1]
    if b > 0:
        start = fixed[b - 1][0]
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    if count == 0:
        return start
    return start + (end - start) * (rank / count)


def _increase(prev: float | None, cur: float | None) -> float | None:
    if prev is None or cur is None:
        return None
    return cur - prev if cur >= prev else cur  # lower: a reset, counted from 0


def _unit(family: str) -> str:
    for suffix, unit in (("_seconds", "seconds"), ("_bytes", "bytes"), ("_events", "events")):
        if family.endswith(suffix):
            return unit
    return ""


def _qname(q: float) -> str:
    return f"p{q * 100:g}"


class _Index:
    """The keys of a recording by sample name, each with its labels."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.by_name: dict[str, list[tuple[str, dict[str, str]]]] = {}
        seen: set[str] = set()
        for sample in rec.samples:
            for key in sample:
                if key in seen:
                    continue
                seen.add(key)
                try:
                    name, labels = _split_key(key)
                except (ValueError, InvalidArgument):
                    continue
                self.by_name.setdefault(name, []).append((key, labels))

    def values(self, key: str) -> list[float | None]:
        return [s.get(key) for s in self.rec.samples]

    def rate(self, key: str) -> tuple[float | None, ...]:
        v, t = self.values(key), self.rec.times
        out: list[float | None] = [None]
        for i in range(1, len(v)):
            d = _increase(v[i - 1], v[i])
            dt = t[i] - t[i - 1]
            out.append(None if d is None or dt <= 0 else d / dt)
        return tuple(out)


def _labelled(
    series: list[tuple[dict[str, str], str, tuple[float | None, ...]]], fallback: str
) -> tuple[Line, ...]:
    """Lines named by the labels that differ between them (and the quantile)."""
    names = sorted({k for labels, _, _ in series for k in labels})
    varying = [k for k in names if len({labels.get(k) for labels, _, _ in series}) > 1]
    lines = []
    for labels, prefix, values in series:
        text = ",".join(f"{k}={labels.get(k, '')}" for k in varying)
        label = " ".join(p for p in (prefix, text) if p) or fallback
        lines.append(Line(label, values))
    return tuple(lines)


def _resolve(name: str, types: dict[str, str]) -> tuple[str, str] | None:
    """``(family, suffix)`` of a selector's name: the family itself, or one of its
    samples (``_total``, ``_bucket``, ``_count``, ``_sum``)."""
    if name in types:
        return name, ""
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)], suffix
    return None


def _panel(index: _Index, sel: Selector, quantiles: tuple[float, ...]) -> Panel:
    rec = index.rec
    if sel.name == CACHE_HIT_RATIO and CACHE_HIT_RATIO in rec.names():
        return _hit_ratio(index, sel)
    found = _resolve(sel.name, rec.types)
    if found is None:
        raise InvalidArgument(
            "metric",
            f"no metric {sel.name!r} in {rec.path!r}; recorded: {', '.join(rec.names())}",
        )
    family, suffix = found
    kind = rec.types[family]
    if kind in _HISTOGRAMS and suffix in ("", "_bucket"):
        return _quantiles(index, sel, family, sel.quantiles or quantiles)
    rate = kind == "counter" or suffix in ("_count", "_sum")
    sample = family + (suffix or ("_total" if kind == "counter" else ""))
    series = [
        (labels, "", index.rate(key) if rate else tuple(index.values(key)))
        for key, labels in index.by_name.get(sample, [])
        if sel.matches(labels)
    ]
    _check_matched(series, sel, index.by_name.get(sample, []))
    if rate:
        unit = "per second" if suffix != "_sum" else f"{_unit(family) or 'sum'} per second"
        title = f"{sample} — rate per second"
    else:
        unit, title = _unit(family), sample
    fallback = "per second" if rate else "value"
    return Panel(str(sel), title, unit, "rate" if rate else "gauge", _labelled(series, fallback))


def _check_matched(series: list[Any], sel: Selector, keys: list[tuple[str, Any]]) -> None:
    if series:
        return
    if not keys:
        raise InvalidArgument("metric", f"{sel.name!r} has no samples in the recording")
    have: dict[str, set[str]] = {}
    for _, labels in keys:
        for k, v in labels.items():
            if k != "le":
                have.setdefault(k, set()).add(v)
    shown = "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in sorted(have.items()))
    raise InvalidArgument("metric", f"no series of {sel.name!r} match {sel}; labels: {shown}")


def _quantiles(index: _Index, sel: Selector, family: str, qs: tuple[float, ...]) -> Panel:
    groups: dict[str, tuple[dict[str, str], list[tuple[float, str]]]] = {}
    all_keys = index.by_name.get(family + "_bucket", [])
    for key, labels in all_keys:
        rest = {k: v for k, v in labels.items() if k != "le"}
        if "le" not in labels or not sel.matches(rest):
            continue
        try:
            bound = float(labels["le"])
        except ValueError:
            continue
        group = json.dumps(rest, sort_keys=True)
        groups.setdefault(group, (rest, []))[1].append((bound, key))
    _check_matched(list(groups), sel, all_keys)
    times = index.rec.times
    series: list[tuple[dict[str, str], str, tuple[float | None, ...]]] = []
    for labels, bounds in groups.values():
        cols = [(bound, index.values(key)) for bound, key in sorted(bounds)]
        per_q: dict[float, list[float | None]] = {q: [None] for q in qs}
        for i in range(1, len(times)):
            prev = [v[i - 1] for _, v in cols]
            cur = [v[i] for _, v in cols]
            if any(x is None for x in prev + cur):
                deltas = None
            elif any(c < p for c, p in zip(cur, prev, strict=True)):  # type: ignore[operator]
                deltas = cur  # a reset: everything since it
            else:
                deltas = [c - p for c, p in zip(cur, prev, strict=True)]  # type: ignore[operator]
            for q in qs:
                per_q[q].append(
                    None
                    if deltas is None
                    else histogram_quantile(
                        q, [(b, float(d or 0.0)) for (b, _), d in zip(cols, deltas, strict=True)]
                    )
                )
        for q in qs:
            series.append((labels, _qname(q), tuple(per_q[q])))
    title = f"{family} — {', '.join(_qname(q) for q in qs)} per interval"
    return Panel(str(sel), title, _unit(family), "quantile", _labelled(series, family))


def _hit_ratio(index: _Index, sel: Selector) -> Panel:
    misses = {
        json.dumps(labels, sort_keys=True): key
        for key, labels in index.by_name.get("statekeeper_cache_misses_total", [])
    }
    series: list[tuple[dict[str, str], str, tuple[float | None, ...]]] = []
    hit_keys = index.by_name.get("statekeeper_cache_hits_total", [])
    for key, labels in hit_keys:
        miss = misses.get(json.dumps(labels, sort_keys=True))
        if miss is None or not sel.matches(labels):
            continue
        h, m = index.values(key), index.values(miss)
        out: list[float | None] = [None]
        for i in range(1, len(h)):
            dh, dm = _increase(h[i - 1], h[i]), _increase(m[i - 1], m[i])
            out.append(None if dh is None or dm is None or dh + dm == 0 else dh / (dh + dm))
        series.append((labels, "", tuple(out)))
    _check_matched(series, sel, hit_keys)
    title = "cache hit ratio — hits / (hits + misses) per interval"
    return Panel(str(sel), title, "ratio", "ratio", _labelled(series, "hit ratio"))


def metric_series(
    recording: Recording,
    metrics: Sequence[str | Selector] | None = None,
    *,
    quantiles: Sequence[float] | None = None,
    since: float | None = None,
    until: float | None = None,
) -> MetricSeries:
    """A panel per metric of ``metrics`` (selectors; default: those of
    :data:`DEFAULT_METRICS` that were recorded, else every recorded family) over the
    samples in ``[since, until)``. Unknown names: :class:`InvalidArgument` naming the
    recorded ones."""
    qs = check_quantiles(quantiles) if quantiles else DEFAULT_QUANTILES
    keep = [
        i
        for i, t in enumerate(recording.times)
        if (since is None or t >= since) and (until is None or t < until)
    ]
    if len(keep) < 2:
        raise InvalidArgument(
            "from",
            f"{recording.path!r} holds {len(keep)} sample(s) in the period: rates need two"
            " at least (record with --samples 2 or more)",
        )
    rec = Recording(
        recording.path,
        tuple(recording.times[i] for i in keep),
        tuple(recording.samples[i] for i in keep),
        recording.types,
        recording.failed,
    )
    index = _Index(rec)
    if metrics:
        chosen = [m if isinstance(m, Selector) else parse_selector(m) for m in metrics]
    else:
        known = set(rec.names())
        chosen = [s for s in map(parse_selector, DEFAULT_METRICS) if s.name in known]
        if not chosen:
            chosen = [Selector(n) for n in rec.names() if n != CACHE_HIT_RATIO]
        if quantiles:
            chosen = [Selector(s.name, s.matchers) for s in chosen]
    panels = tuple(_panel(index, s, qs) for s in chosen)
    return MetricSeries(rec.times, panels, rec.path, rec.failed)
