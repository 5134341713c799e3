"""``statekeeper delete`` (asked, answered yes) deletes the agent it asked about, not a
new agent of the same id made after its last look. h/review9 read the head event again
just before the delete and compared it with the one shown, but the delete itself was
conditional on the head seq alone: another process deleting the agent and writing it
again up to the same head *after* that second read lost its acknowledged writes —
"deleted agent 'beta' (2 event(s))", exit 0. Now the delete is conditional on the head
event's stored checksum too, in the engine's atomic step. The interleaving is made
exact by running the other process from the command's second look, after it read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app, delete_cmd
from statekeeper.store import delete_shown

from ..backends._services import fresh_url

ENGINES = ["sqlite", "postgresql", "redis", pytest.param("s3", marks=pytest.mark.slow)]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_agent_made_again_after_the_last_look_is_not_deleted(
    runner: CliRunner, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url(engine, tmp_path) as url:

        async def setup() -> None:
            async with StateStore(url) as store:
                await store.save("beta", {"old": 1})
                await store.save("beta", {"old": 2})

        asyncio.run(setup())
        real = delete_shown.head_identity
        looks: list[int] = []

        async def look_then_made_again(store: Any, agent_id: str) -> Any:
            found = await real(store, agent_id)
            looks.append(1)
            if len(looks) == 2:  # the second look, just before the delete: then
                async with StateStore(url) as other:  # another process makes beta again
                    assert await other.delete("beta")
                    await other.save("beta", {"new": 1})
                    await other.save("beta", {"new": 2})  # head 2, as shown
            return found

        # the first look (the question's) in the command, the second in delete_shown
        monkeypatch.setattr(delete_cmd, "head_identity", look_then_made_again)
        monkeypatch.setattr(delete_shown, "head_identity", look_then_made_again)
        monkeypatch.setattr(typer, "confirm", lambda *a, **k: True)
        result = runner.invoke(app, ["delete", "beta", "--db", url])
        assert len(looks) == 2
        assert result.exit_code == 1, result.output
        assert "deleted and made again since it was shown" in result.output
        assert "not deleted" in result.output

        async def data() -> Any:
            async with StateStore(url) as store:
                return (await store.load("beta")).data

        assert asyncio.run(data()) == {"new": 2}  # the new agent's acknowledged writes
