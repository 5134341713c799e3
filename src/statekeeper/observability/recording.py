"""Recording live metrics over a period: ``statekeeper metrics record``.

A *source* answers with metrics in the Prometheus text format: a ``/metrics`` URL
(:func:`http_source`: a worker's :func:`~.exposition.start_http_server`, ``statekeeper
serve --metrics``, ``statekeeper metrics serve``) or a scan of a store's contents
(:func:`exporter_source`, what ``metrics serve --once`` prints). :func:`record` reads it
every ``every`` seconds and appends one JSON line per sample to a file::

    {"t": "2026-12-02T10:00:15.000000+00:00",
     "metrics": {"statekeeper_appends_total{backend=\\"sqlite\\",store=\\"w\\"}": 42.0, ...},
     "types": {"statekeeper_appends": "counter", ...}}

Keys are the samples as Prometheus writes them (name and sorted labels): counters'
``_total``, gauges, histograms' ``_bucket{le=...}``/``_sum``/``_count``; the ``types``
name each family's kind (``_created`` timestamps and info families are left out). A
sample the source failed to give, after the first one, is a line ``{"t": ..., "error":
...}``: a gap in the plot, not the end of the recording.

The file is appended to, one whole line per write, so a recording can be resumed and a
stopped one (Ctrl-C, a kill) keeps every sample taken; the series are computed from it
by :mod:`.series`. The clock and the sleep are injectable (a test records N samples
without waiting for any).
"""

from __future__ import annotations

import base64
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .._durations import DURATION_EXAMPLES, seconds_in
from ..backends.redact import mask_url
from ..errors import BackendUnavailable, ConfigurationError, InvalidArgument, StatekeeperError

__all__ = [
    "Recorded",
    "Source",
    "exporter_source",
    "http_source",
    "parse_duration",
    "parse_exposition",
    "record",
    "sample_key",
]

#: families whose samples are not measurements (``_info`` is 1, ``_created`` a time)
_SKIPPED_TYPES = frozenset({"info"})


@dataclass(frozen=True)
class Source:
    """Where samples come from: ``read()`` returns the Prometheus text exposition;
    ``name`` says where in messages (a URL without its password)."""

    name: str
    read: Callable[[], str]


@dataclass(frozen=True)
class Recorded:
    """What :func:`record` did: ``samples`` lines written by this run, ``failed`` error
    lines (the source did not answer), ``interrupted`` when Ctrl-C ended it."""

    path: Path
    samples: int
    failed: int
    first: float | None
    last: float | None
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "samples": self.samples,
            "failed": self.failed,
            "first": _iso(self.first) if self.first is not None else None,
            "last": _iso(self.last) if self.last is not None else None,
            "interrupted": self.interrupted,
        }


def parse_duration(text: str | float, argument: str) -> float:
    """Seconds in ``90``, ``"90s"``, ``"500ms"``, ``"15m"``, ``"1h30m"``, ``"2d"``, ``"1w"``;
    :class:`InvalidArgument` naming ``argument`` when it is not a positive duration."""
    seconds = seconds_in(text)
    if seconds is None:
        raise InvalidArgument(
            argument,
            f"{argument} must be a positive duration like {DURATION_EXAMPLES}, not {text!r}",
        )
    return seconds


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample_key(name: str, labels: dict[str, str]) -> str:
    """``name{a="x",b="y"}`` (labels sorted, values escaped as Prometheus does)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_exposition(text: str, source: str) -> tuple[dict[str, float], dict[str, str]]:
    """``(metrics, types)`` of a Prometheus text exposition (prometheus_client's parser);
    :class:`ConfigurationError` naming ``source`` when ``text`` is not one."""
    from prometheus_client.parser import text_string_to_metric_families

    metrics: dict[str, float] = {}
    types: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.type in _SKIPPED_TYPES:
                continue
            types[family.name] = family.type
            for s in family.samples:
                if s.name.endswith("_created") and s.name != family.name:
                    continue
                metrics[sample_key(s.name, dict(s.labels))] = float(s.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        first = text.lstrip()[:40]
        raise ConfigurationError(
            f"{source} did not answer in the Prometheus text format"
            f" ({type(exc).__name__}: {str(exc)[:80]}; the body starts {first!r})"
        ) from None
    if not types:
        raise ConfigurationError(
            f"{source} answered with no metrics (an empty body: is it a /metrics endpoint?)"
        )
    return metrics, types


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without its user:password@, the base64 basic credentials or None)``."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    credentials = base64.b64encode(pair.encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=hostport)), credentials


def http_source(url: str, *, timeout: float = 10.0, token: str | None = None) -> Source:
    """A ``/metrics`` URL, read with a GET (``token``: sent as ``Authorization: Bearer``,
    as the inspector's ``/metrics`` wants; ``user:password@`` in the URL: sent as HTTP
    basic authentication). Unreachable: :class:`BackendUnavailable`;
    an HTTP error status: :class:`ConfigurationError`; both name the URL, never its
    password or the token."""
    if not url.lower().startswith(("http://", "https://")):
        raise InvalidArgument("source", f"not an http(s) URL: {mask_url(url)!r}")
    shown = mask_url(url)
    headers = {"Accept": "text/plain;version=0.0.4"}
    # ``user:password@host`` is HTTP basic authentication: urllib does not take it from
    # the URL (it looked the whole ``user:password@host`` up in DNS, and answered "Name
    # or service not known"), so it is sent as the header and the URL goes without it
    url, basic = _without_userinfo(url)
    if token and basic:
        raise InvalidArgument(
            "source",
            f"give a token (--token-file) or a user:password in the URL, not both: {shown!r}",
        )
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif basic:
        headers["Authorization"] = f"Basic {basic}"
    host = urllib.parse.urlsplit(url).hostname or ""

    def refused(code: int) -> str:
        if code not in (401, 403):
            return ""
        if code == 403:
            return " (the credentials were accepted, but do not give access to this page)"
        if token:
            return " (the token given with --token-file was refused: is it this server's?)"
        if basic:
            return " (the user and password in the URL were refused)"
        return " (it wants credentials: the inspector's token with --token-file)"

    def read() -> str:
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body: bytes = answer.read()
                charset = answer.headers.get_content_charset() or "utf-8"
        except urllib.error.HTTPError as exc:
            raise ConfigurationError(
                f"{shown} answered HTTP {exc.code} {exc.reason}{refused(exc.code)}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, socket.gaierror):  # a real DNS answer: no such host
                reason = f"the host name {host!r} did not resolve ({reason.strerror})"
            raise BackendUnavailable(f"cannot read {shown}: {reason}") from None
        try:
            return body.decode(charset)
        except (UnicodeDecodeError, LookupError):
            raise ConfigurationError(f"{shown} answered with a body that is not text") from None

    return Source(shown, read)


def exporter_source(
    scan: Callable[[], Any],
    *,
    name: str = "store",
    shown: str = "",
    state_label: Callable[[str], str] = str,
) -> Source:
    """A store's contents as metrics: each read runs ``scan`` (a coroutine function
    returning a fresh :class:`~.health.HealthReport`; its errors are raised) and
    exposes the report the way ``statekeeper metrics serve`` does
    (:class:`~.exposition.StoreExporter`, its states labelled by ``state_label``:
    :func:`~.exposition.state_label`)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from .exposition import StoreExporter, run_scan

    registry = CollectorRegistry()
    exporter = StoreExporter(None, name=name, interval=0.0, state_label=state_label)
    registry.register(exporter)

    def read() -> str:
        exporter.update(run_scan(scan))
        return generate_latest(registry).decode()

    return Source(shown or name, read)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _open_recording(path: Path) -> Any:
    """``path`` opened to append samples: a new file, or a recording (its torn last
    line, if a run was killed mid-write, cut off). Anything else is refused."""
    if not path.parent.is_dir():
        raise InvalidArgument("out", f"no such directory: {str(path.parent)!r}")
    if path.is_dir():
        raise InvalidArgument("out", f"{str(path)!r} is a directory")
    try:
        handle = path.open("a+b")
    except OSError as exc:
        raise InvalidArgument("out", f"cannot write {str(path)!r}: {exc.strerror}") from None
    handle.seek(0)
    first = handle.readline()
    if first:
        try:
            head = orjson.loads(first)
            ok = isinstance(head, dict) and "t" in head
        except orjson.JSONDecodeError:
            ok = False
        if not ok:
            handle.close()
            raise InvalidArgument(
                "out",
                f"{str(path)!r} holds something else than a metrics recording"
                " (its first line is not a sample): choose another file",
            )
        handle.seek(0, 2)
        end = handle.tell()
        handle.seek(max(0, end - 1))
        if handle.read(1) != b"\n":  # a torn last line: cut back to the last whole one
            handle.seek(0)
            data = handle.read()
            handle.truncate(data.rfind(b"\n") + 1)
    return handle


def record(
    source: Source,
    out: str | Path,
    *,
    every: float | str,
    duration: float | str | None = None,
    samples: int | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_sample: Callable[[int, float], None] | None = None,
) -> Recorded:
    """Read ``source`` every ``every`` seconds and append each sample to ``out`` (JSON
    Lines), until ``samples`` were taken, ``duration`` has passed (samples at 0,
    ``every``, ... up to ``duration``), or Ctrl-C (neither given: until Ctrl-C).

    The first read must work (a wrong URL fails at once, nothing written); a later
    failure is written as an error line and the recording goes on. ``clock`` (seconds
    since the epoch) and ``sleep`` are injectable; ``on_sample(n, t)`` is called after
    each line written.
    """
    interval = parse_duration(every, "every")
    period = parse_duration(duration, "for") if duration is not None else None
    if samples is not None and (
        isinstance(samples, bool) or not isinstance(samples, int) or samples < 1
    ):
        raise InvalidArgument("samples", f"samples must be a positive integer, not {samples!r}")
    if samples is not None and period is not None:
        raise InvalidArgument("samples", "give a duration or a number of samples, not both")
    path = Path(out)
    existed = path.exists()
    handle = _open_recording(path)
    written = failed = taken = 0
    first: float | None = None
    last: float | None = None
    interrupted = False
    try:
        start = clock()
        slot = 0
        while True:
            now = clock()
            try:
                metrics, types = parse_exposition(source.read(), source.name)
            except StatekeeperError as exc:
                if taken == 0:
                    raise
                line: dict[str, Any] = {"t": _iso(now), "error": str(exc)}
                failed += 1
            else:
                line = {"t": _iso(now), "metrics": metrics, "types": types}
                written += 1
            handle.write(orjson.dumps(line) + b"\n")
            handle.flush()
            taken += 1
            first = now if first is None else first
            last = now
            if on_sample is not None:
                on_sample(taken, now)
            if samples is not None and taken >= samples:
                break
            # the next slot on the grid start + k * every (slots missed while a slow
            # read ran are skipped, not caught up in a burst)
            slot = max(slot + 1, math.floor((clock() - start) / interval) + 1)
            target = start + slot * interval
            if period is not None and target > start + period + 1e-9:
                break
            delay = target - clock()
            if delay > 0:
                sleep(delay)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        handle.close()
        if not existed and taken == 0:
            path.unlink(missing_ok=True)  # nothing recorded: leave no empty file behind
    return Recorded(path, written, failed, first, last, interrupted)
