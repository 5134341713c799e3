"""``statekeeper diagram --db`` overlays the transitions a store's history shows; for an
agent retention compacted it counted the kept events only (×1 for an arrow the agent
took 4 times) as if they were the whole history, without a word (the inspector's agent
page says so since h/trialreplay). It says so now, naming the agents."""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeeper import StateStore, StateTransition
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ._subprocess import cli_in_process


def _made(path: Path, keep: int | None) -> str:
    url = f"sqlite:///{path}"
    rounds = [StateTransition.START_PROCESSING, StateTransition.COMPLETE, StateTransition.RESET]

    async def build() -> None:
        async with StateStore(url) as store:
            agent = await store.agent("m")
            for _ in range(4):
                for move in rounds:
                    await agent.transition(move)
            if keep is not None:
                await apply_retention(store, RetentionPolicy.parse(f"* keep_last={keep}"))

    asyncio.run(build())
    return url


def test_the_observed_counts_say_which_agents_were_compacted(tmp_path: Path) -> None:
    said = cli_in_process("diagram", "--db", _made(tmp_path / "c.db", 4))
    assert said.code == 0, str(said)
    text = " ".join(said.stdout.split())
    assert "1 agent(s) compacted by retention: counted over the events kept after" in text
    assert "base only: m" in text


def test_a_whole_history_carries_no_such_note(tmp_path: Path) -> None:
    said = cli_in_process("diagram", "--db", _made(tmp_path / "w.db", None))
    assert said.code == 0, str(said)
    assert "compacted by retention" not in said.stdout
