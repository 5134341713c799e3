"""``statekeeper serve --metrics`` on an encrypted store: ``/metrics`` labels the agents
by keyed hashes of their states, not by the names (a scrape is kept by Prometheus in
clear), unless ``--metrics-state-labels`` (``metrics_state_labels=True``) says so; a
store without a key keeps its state names."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key

from .conftest import make_client

SECRET = "SECRET-STATE-xyz"


def _store(tmp_path: Path, encrypted: bool) -> tuple[str, Path | None]:
    url = f"sqlite:///{tmp_path / 'inspected.db'}"
    keys = tmp_path / "keys.json" if encrypted else None
    if keys is not None:
        Keyring.write_file(keys, {"k1": generate_key()}, "k1")

    async def seed() -> None:
        keyring = Keyring.from_file(keys) if keys is not None else None
        async with StateStore(url, keyring=keyring) as store:
            await store.create("agent-1", {}, fsm_state=SECRET)

    asyncio.run(seed())
    return url, keys


def _metrics(url: str, keys: Path | None, **options: bool) -> str:
    with make_client(url, key_file=keys, metrics=True, **options) as client:
        response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert "statekeeper_agents_in_state" in response.text
    return str(response.text)


def test_an_encrypted_stores_metrics_hold_no_state_name(tmp_path: Path) -> None:
    url, keys = _store(tmp_path, encrypted=True)
    text = _metrics(url, keys)
    assert SECRET not in text
    opaque = r'statekeeper_agents_in_state\{state="s-[0-9a-f]{16}",store="[^"]+"\} 1\.0'
    assert re.search(opaque, text)


@pytest.mark.parametrize("encrypted", [True, False])
def test_the_names_when_asked_for_or_without_a_key(tmp_path: Path, encrypted: bool) -> None:
    url, keys = _store(tmp_path, encrypted)
    # (without a key the option is not given: the names are the default there)
    text = _metrics(url, keys, **({"metrics_state_labels": True} if encrypted else {}))
    assert f'statekeeper_agents_in_state{{state="{SECRET}"' in text
