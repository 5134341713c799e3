"""``statekeeper serve --metrics``: the inspector instruments its store and serves the
Prometheus metrics at ``/metrics``, behind the token, and to admins on ``**`` only when
it acts as a principal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from statekeeper.governance import parse_policy

from .conftest import make_client

POLICY = """\
[principals.alice]
read = ["agent-*"]

[principals.ops]
admin = ["**"]
"""


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of family ``name`` (by label set) in an exposition ``text``."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def appends(client: Any) -> float:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    values = samples(response.text, "statekeeper_appends_total")
    assert list(values) == [(("backend", "sqlite"), ("store", "sqlite"))], values
    return next(iter(values.values()))


def test_metrics_count_the_saves_of_the_inspectors_store(store_copy: str) -> None:
    with make_client(store_copy, metrics=True, allow_writes=True) as client:
        before = appends(client)
        inspector = client.app.app.state.inspector
        client.portal.call(inspector.store.save, "agent-metrics", {"n": 1})
        client.portal.call(inspector.store.save, "agent-metrics", {"n": 2})
        assert appends(client) == before + 2
        # the pages' own reads are measured too: a load is an operation with a latency
        assert client.get("/agent?id=agent-metrics").status_code == 200
        text = client.get("/metrics").text
        loads = samples(text, "statekeeper_operation_duration_seconds_count")
        assert any(dict(k)["operation"] == "load" and v >= 1 for k, v in loads.items()), loads


def test_metrics_need_the_token_and_the_option(seeded_url: str) -> None:
    with make_client(seeded_url, metrics=True) as client:
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with make_client(seeded_url) as client:  # no --metrics: no endpoint, no instrumentation
        assert client.get("/metrics").status_code == 404
        inspector = client.app.app.state.inspector
        assert type(inspector.store.backend).__name__ == "SQLiteBackend"


def test_metrics_are_for_store_admins_when_acting_as_a_principal(seeded_url: str) -> None:
    policy = parse_policy(POLICY)
    with make_client(seeded_url, metrics=True, principal="alice", policy=policy) as client:
        assert client.get("/agents").status_code == 200  # alice may use the inspector
        refused = client.get("/metrics")
        assert refused.status_code == 403
        assert "admin" in refused.text and "statekeeper_" not in refused.text
    with make_client(seeded_url, metrics=True, principal="ops", policy=policy) as client:
        assert samples(client.get("/metrics").text, "statekeeper_appends_total")


def test_serve_metrics_prints_the_address_and_serves_it(seeded_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STATEKEEPER_INSPECTOR_TOKEN": "t" * 32}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.cli", "serve", seeded_url, "--port", "0",
         "--metrics"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the link; blocks until the server listens
        line = proc.stdout.readline()
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+)/metrics", line)
        assert found is not None, line
        auth = {"Authorization": "Bearer " + "t" * 32}
        with httpx.Client(base_url=found.group(1), timeout=30, headers=auth) as client:
            assert client.get("/agent?id=agent-000").status_code == 200
            text = client.get("/metrics").text
        loads = samples(text, "statekeeper_operation_duration_seconds_count")
        assert any(dict(k)["operation"] == "load" and v >= 1 for k, v in loads.items()), loads
    finally:
        proc.terminate()
        proc.wait(timeout=60)
