"""The content gauges of an encrypted store name no state: ``statekeeper metrics serve``
labels ``statekeeper_agents_in_state`` with a keyed hash of each state name (the names
are the agents' data, which the key keeps unreadable; the endpoint has no
authentication), unless ``--state-labels`` says otherwise; a store without a key is
labelled by its state names as before."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.observability.exposition import StoreExporter, start_http_server
from statekeeper.observability.health import health_report

SECRET = "SECRET-STATE-xyz"
OPAQUE = re.compile(r'statekeeper_agents_in_state\{state="(s-[0-9a-f]{16})",store="store"\} 2\.0')


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("STATEKEEPER_URL", raising=False)
    monkeypatch.delenv("STATEKEEPER_KEYS", raising=False)
    monkeypatch.delenv("STATEKEEPER_KEY_FILE", raising=False)
    return CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})


def _key_file(path: Path) -> Path:
    Keyring.write_file(path, {"k1": generate_key()}, "k1")
    return path


def _seed(url: str, keyring: Keyring | None) -> None:
    async def seed() -> None:
        async with StateStore(url, keyring=keyring) as store:
            await store.create("a1", {}, fsm_state=SECRET)
            await store.create("a2", {}, fsm_state=SECRET)
            await store.create("a3", {}, fsm_state="other")
            await store.create("a4", {})

    asyncio.run(seed())


def _once(runner: CliRunner, url: str, *extra: str) -> str:
    result = runner.invoke(app, ["metrics", "serve", "--once", "--db", url, *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_an_encrypted_store_publishes_no_state_name(runner: CliRunner, tmp_path: Path) -> None:
    keys = _key_file(tmp_path / "keys.json")
    url = f"sqlite:///{tmp_path / 's.db'}"
    _seed(url, Keyring.from_file(keys))
    text = _once(runner, url, "--key-file", str(keys))
    assert SECRET not in text and "other" not in text
    # still split by state: two agents under one opaque label, one under another, the
    # agents without a machine state under "none"
    found = OPAQUE.search(text)
    assert found is not None, text
    assert re.search(r'agents_in_state\{state="s-[0-9a-f]{16}",store="store"\} 1\.0', text)
    assert 'agents_in_state{state="none",store="store"} 1.0' in text
    assert 'statekeeper_agents{store="store"} 4.0' in text
    # the same state has the same label at every scan
    again = OPAQUE.search(_once(runner, url, "--key-file", str(keys)))
    assert again is not None and again.group(1) == found.group(1)


def test_the_operator_may_opt_in_to_the_names(runner: CliRunner, tmp_path: Path) -> None:
    keys = _key_file(tmp_path / "keys.json")
    url = f"sqlite:///{tmp_path / 's.db'}"
    _seed(url, Keyring.from_file(keys))
    text = _once(runner, url, "--key-file", str(keys), "--state-labels")
    assert f'statekeeper_agents_in_state{{state="{SECRET}",store="store"}} 2.0' in text


def test_a_store_without_a_key_is_labelled_by_its_state_names(
    runner: CliRunner, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _seed(url, None)
    text = _once(runner, url)
    assert f'statekeeper_agents_in_state{{state="{SECRET}",store="store"}} 2.0' in text
    assert 'statekeeper_agents_in_state{state="other",store="store"} 1.0' in text


def test_the_label_depends_on_the_key() -> None:
    from statekeeper.observability.exposition import state_label

    async def labels(keyring: Keyring) -> str:
        async with StateStore("memory://", keyring=keyring) as store:
            return state_label(store.codec)(SECRET)

    one = Keyring({"k1": generate_key()}, active="k1")
    other = Keyring({"k1": generate_key()}, active="k1")
    first = asyncio.run(labels(one))
    assert re.fullmatch(r"s-[0-9a-f]{16}", first)
    assert asyncio.run(labels(one)) == first
    assert asyncio.run(labels(other)) != first


def test_a_scrape_over_http_holds_no_state_name(tmp_path: Path) -> None:
    from statekeeper.observability.exposition import state_label

    keyring = Keyring({"k1": generate_key()}, active="k1")
    url = f"sqlite:///{tmp_path / 's.db'}"
    _seed(url, keyring)
    exporter: StoreExporter

    async def scan() -> Any:
        async with StateStore(url, keyring=keyring) as store:
            exporter.state_label = state_label(store.codec)
            return await health_report(store)

    exporter = StoreExporter(scan, name="main", interval=3600)
    registry = CollectorRegistry()
    registry.register(exporter)
    server, thread = start_http_server(0, "127.0.0.1", registry)
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{server.server_port}/metrics", timeout=30
        ) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert 'statekeeper_agents{store="main"} 4.0' in text
    assert "statekeeper_agents_in_state" in text
    assert SECRET not in text


@pytest.mark.parametrize("opt_in", [False, True])
def test_a_recording_of_an_encrypted_store_holds_no_state_name_unless_asked(
    runner: CliRunner, tmp_path: Path, opt_in: bool
) -> None:
    keys = _key_file(tmp_path / "keys.json")
    url = f"sqlite:///{tmp_path / 's.db'}"
    _seed(url, Keyring.from_file(keys))
    out = tmp_path / "rec.jsonl"
    extra = ["--state-labels"] if opt_in else []
    args = ["metrics", "record", url, "--samples", "1", "--out", str(out), "--key-file", str(keys)]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    recorded = out.read_text(encoding="utf-8")
    assert "statekeeper_agents_in_state" in recorded
    assert (SECRET in recorded) is opt_in
