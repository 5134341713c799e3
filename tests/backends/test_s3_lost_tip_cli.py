"""``statekeeper delete`` of an S3 agent whose newest commit something else deleted
(h/s3incarn: its head is an IntegrityError naming the lost seqs). The backend can
delete such a stream, but the command read the head first and failed with that
error (exit 2), every time: ``agents`` and ``verify`` named the agent, and nothing in
the CLI could remove it or acknowledge the loss. Now it is deleted as a lost agent
is (asked first), and an agent whose head reads again by then is left alone."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("boto3")

import boto3  # type: ignore[import-untyped]
import typer
from typer.testing import CliRunner

from statekeeper import StateStore, SyncStateStore
from statekeeper.cli import app

from ._services import drop_bucket, moto_endpoint, s3_credentials, s3_url

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


@pytest.fixture
def url() -> Iterator[str]:
    bucket = "losttip-" + uuid.uuid4().hex[:16]
    yield s3_url(bucket)
    drop_bucket(bucket)


def _lose_newest(url: str) -> None:
    with SyncStateStore(url) as store:
        for n in range(3):
            store.save("x", {"n": n})
    bucket = url.split("/")[2]
    client = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
    client.delete_object(Bucket=bucket, Key=f"agents/a/{b'x'.hex()}/e/{3:020d}")


@pytest.mark.parametrize("yes", [True, False])
def test_an_agent_that_lost_its_newest_commit_can_be_deleted(
    url: str, yes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lose_newest(url)
    asked: list[str] = []

    def answered_yes(text: str, *args: Any, **kw: Any) -> bool:
        asked.append(text)
        return True

    monkeypatch.setattr(typer, "confirm", answered_yes)
    runner = CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})
    result = runner.invoke(app, ["delete", "x", "--db", url, *(["--yes"] if yes else [])])
    assert result.exit_code == 0, result.output
    assert "the loss is acknowledged" in result.output
    assert bool(asked) is not yes and all("events 3..3 are missing" in q for q in asked)
    with SyncStateStore(url) as store:
        assert store.head("x") == 0
        store.save("x", {"again": 1})  # its id can be used again
        assert store.head("x") == 1


def test_one_whose_head_reads_again_by_then_is_not_deleted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lose_newest(url)

    def answered_after_a_new_x(text: str, *args: Any, **kw: Any) -> bool:
        with SyncStateStore(url) as other:  # another process: deleted, made again
            other.delete("x")
            other.save("x", {"new": 1})
        return True

    monkeypatch.setattr(typer, "confirm", answered_after_a_new_x)
    runner = CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})
    result = runner.invoke(app, ["delete", "x", "--db", url])
    assert result.exit_code == 1, result.output
    assert "changed since it was shown" in result.output
    with SyncStateStore(url) as store:
        assert store.load("x").data == {"new": 1}


def test_repair_names_it_and_goes_on_with_the_other_agents(url: str) -> None:
    """``agents`` says "`statekeeper repair` rebuilds what it can"; repair read each
    agent's head first and stopped the whole run on this one (exit 2), the other
    agents' damaged snapshots never looked at. Now it is an unrepairable problem of
    its own (exit 3), named, and the rest are checked."""
    from statekeeper.store.repair import repair

    _lose_newest(url)
    with SyncStateStore(url) as store:
        store.save("y", {"n": 1})
    runner = CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})
    result = runner.invoke(app, ["repair", "--db", url, "--json"])
    assert result.exit_code == 3, result.output
    assert "events 3..3 are missing" in result.output
    assert '"agents": 2' in result.output
    result = runner.invoke(app, ["repair", "x", "--db", url])
    assert result.exit_code == 3, result.output

    async def whole_store() -> None:  # the library's run too
        async with StateStore(url) as store:
            report = await repair(store)
            assert report.agents == 2 and [p.agent_id for p in report.unrepairable] == ["x"]

    asyncio.run(whole_store())
