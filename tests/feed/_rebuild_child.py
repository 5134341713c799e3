"""Child process of test_rebuild_killed_resumed: ``URL READ_MODEL`` rebuilds the
projection ``agent_states`` from the agents' states, two agents a page, and kills
itself (SIGKILL) right after the first page was seeded and committed."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import Sequence

from statekeeper import StateStore
from statekeeper.feed import ProjectionRunner, seeding
from statekeeper.records import Snapshot

real_seed_page = seeding._seed_page


def seed_page_then_killed(
    db: sqlite3.Connection, projection: object, states: Sequence[Snapshot]
) -> None:
    real_seed_page(db, projection, states)  # type: ignore[arg-type]
    os.kill(os.getpid(), signal.SIGKILL)  # the named point: after the first page


async def main(url: str, read_model: str) -> None:
    seeding.PAGE = 2
    seeding._seed_page = seed_page_then_killed  # type: ignore[assignment]
    async with StateStore(url) as store, ProjectionRunner(store, read_model) as runner:
        await runner.rebuild("agent_states", from_states=True)
    print("not killed", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
