"""The demo's worker process (``python -m statekeeper.demo``): runs the agent against a
SQLite store and prints one JSON line per committed event, so the parent knows how far
it got. Free of rich and typer so that it starts fast."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..machine import AgentStateMachine
from ..store import DurableAgent, StateStore
from .agent import drive, initial_data
from .tools import ToolBox

# ---------------------------------------------------------------------------- worker


async def _worker(
    url: str, agent_id: str, files: Path, step_delay: float, snapshot_every: int
) -> None:
    def emit(agent: DurableAgent, info: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({**info, "t": time.time()}) + "\n")
        sys.stdout.flush()

    async with StateStore(url, snapshot_every=snapshot_every) as store:
        agent = await store.agent(agent_id, AgentStateMachine(), initial_data=initial_data())
        if agent.seq == 1:
            emit(
                agent, {"seq": 1, "event": "created", "from": None, "to": agent.machine.state_value}
            )
        tools = ToolBox(files / "corpus", files / "tools.log", agent_id)
        await drive(
            agent, tools, actor=f"worker:{os.getpid()}", step_delay=step_delay, on_commit=emit
        )


def worker_main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process (``python -m statekeeper.demo``)."""
    parser = argparse.ArgumentParser(
        prog="python -m statekeeper.demo",
        description="statekeeper demo worker (started by `statekeeper demo`)",
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--files", required=True, type=Path)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--snapshot-every", type=int, default=8)
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps({"hello": os.getpid()}) + "\n")
    sys.stdout.flush()
    asyncio.run(_worker(args.url, args.agent, args.files, args.step_delay, args.snapshot_every))
    return 0
