"""An agent deleted by another process after ``export`` listed it and before it read it
stopped the whole export with "agent 'b' not found" (exit 1: an id the user never
named, no file). It is left out and named as deleted while the export ran, as a backup
counts one "vanished"; the file imports whole.

The store itself cannot tell an agent deleted from one that never existed (a delete
leaves nothing behind on every engine): ``load`` of either says "not found", pinned
here."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.errors import AgentNotFound
from statekeeper.records import AgentInfo
from statekeeper.store.store import StateStore as PlainStore


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def build() -> None:
        async with StateStore(url) as store:
            for agent_id in ("a", "b", "c"):
                await store.save(agent_id, {"n": 1})
                await store.save(agent_id, {"n": 2})

    asyncio.run(build())
    return url


def delete_b_once_listed(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Another process deletes 'b' once the listing that holds it was read."""
    listed = PlainStore.iter_agents

    async def racing(self: PlainStore) -> AsyncIterator[AgentInfo]:
        async for info in listed(self):
            yield info
            if info.agent_id == "a":
                async with StateStore(url) as other:
                    assert await other.delete("b")

    monkeypatch.setattr(PlainStore, "iter_agents", racing)


def test_an_agent_deleted_after_it_was_listed_is_left_out_and_named(
    runner: CliRunner, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    with monkeypatch.context() as m:
        delete_b_once_listed(m, url)
        done = runner.invoke(app, ["export", "--db", url, "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "exported 2 agent(s), 4 event(s)" in done.stdout
    assert "left out 1 agent(s) deleted while the export ran (listed, then gone): b" in (
        done.stdout
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line.get("agent_id") for line in lines if "agent_id" in line} == {"a", "c"}
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    imported = runner.invoke(app, ["import", str(out), "--db", target])
    assert imported.exit_code == 0, imported.output

    with monkeypatch.context() as m:  # --json names it too

        async def again() -> None:
            async with StateStore(url) as store:
                await store.save("b", {"n": 1})

        asyncio.run(again())
        delete_b_once_listed(m, url)
        as_json = runner.invoke(app, ["export", "--db", url, "-o", str(out), "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["deleted"] == ["b"]


def test_an_agent_named_that_is_gone_is_still_not_found(runner: CliRunner, url: str) -> None:
    done = runner.invoke(app, ["export", "nobody", "--db", url])
    assert done.exit_code == 1 and "agent 'nobody' not found" in done.output


async def test_load_of_a_deleted_agent_says_not_found(url: str) -> None:
    """Pinned: nothing of a deleted agent is kept (no tombstone on any engine), so the
    store cannot say "deleted" rather than "never existed"."""
    async with StateStore(url) as store:
        assert await store.delete("b")
        for agent_id in ("b", "never"):
            with pytest.raises(AgentNotFound) as caught:
                await store.load(agent_id)
            assert str(caught.value) == f"agent {agent_id!r} not found"
            assert caught.value.agent_id == agent_id
