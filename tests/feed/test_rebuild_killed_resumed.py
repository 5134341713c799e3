"""A live runner finishes a rebuild that was killed while it seeded. Was: ``run()``
found the projection ``seeding``, warned once and waited for someone to run
``rebuild`` by hand — for ever, if nobody did. Now a rebuild holds a lock the system
releases when its process dies (:mod:`statekeeper.feed.rebuild_lock`), and a live
runner that finds the projection ``seeding`` with that lock free resumes the rebuild
itself, then follows. The rebuild is killed at a named point (a child process that
SIGKILLs itself right after its first page of states was seeded), never by timing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.feed import ProjectionRunner

from ..backends._services import fresh_url
from ._shared import current

CHILD = Path(__file__).with_name("_rebuild_child.py")
#: the longest the runner may take to finish the rebuild (a bound, not a pace)
DEADLINE = 60.0


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_live_runner_finishes_a_killed_rebuild(engine: str, tmp_path: Path) -> None:
    read_model = tmp_path / "rm.db"
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            for i in range(10):
                await store.save(f"a{i % 5}", {"i": i}, fsm_state=f"s{i}")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            child = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(CHILD), url, str(read_model)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert child.returncode == -signal.SIGKILL, child.stderr + child.stdout
            async with ProjectionRunner(store, read_model) as runner:
                states = {s.name: s.state for s in await runner.status()}
                assert states["agent_states"] == "seeding"  # killed part-way
                await store.save("a1", {"after": True}, fsm_state="after-the-kill")
                live = asyncio.create_task(runner.run(["agent_states"]))
                try:
                    expected = await current(store)
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + DEADLINE
                    while True:  # the condition: finished and up to date
                        (status,) = [s for s in await runner.status() if s.name == "agent_states"]
                        got = await runner.query(
                            "SELECT agent_id, state, seq FROM agent_states ORDER BY 1"
                        )
                        if status.state == "live" and got == expected:
                            break
                        assert not live.done(), live
                        assert loop.time() < deadline, (status, got)
                        await asyncio.sleep(0.05)
                    await store.save("a2", {"later": True}, fsm_state="followed")
                    expected = await current(store)
                    while (
                        await runner.query(
                            "SELECT agent_id, state, seq FROM agent_states ORDER BY 1"
                        )
                        != expected
                    ):
                        assert loop.time() < deadline
                        await asyncio.sleep(0.05)
                finally:
                    live.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await live


class _Stop(Exception):
    pass


async def test_a_live_runner_finishes_a_rebuild_interrupted_past_its_seeding(
    tmp_path: Path,
) -> None:
    """A rebuild that stopped while following the feed (state ``rebuilding``, its lock
    free): a live ``run`` finishes it, then the projection is ``live``. Was: followed to
    the head and beyond, still ``rebuilding`` to every ``status`` until a ``rebuild``."""
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for i in range(12):
            await store.save(f"a{i % 3}", {"i": i}, fsm_state=f"s{i}")
        async with ProjectionRunner(store, tmp_path / "rm.db", batch_size=2) as runner:

            def stop(done: int, total: int) -> None:
                raise _Stop

            with contextlib.suppress(_Stop):
                await runner.rebuild("agent_states", progress=stop)
            (status,) = [s for s in await runner.status() if s.name == "agent_states"]
            assert status.state == "rebuilding"  # interrupted after its first batch
            live = asyncio.create_task(runner.run(["agent_states"]))
            try:
                expected = await current(store)
                deadline = asyncio.get_running_loop().time() + DEADLINE
                while True:  # the condition: finished and up to date
                    (status,) = [s for s in await runner.status() if s.name == "agent_states"]
                    got = await runner.query(
                        "SELECT agent_id, state, seq FROM agent_states ORDER BY 1"
                    )
                    if status.state == "live" and got == expected:
                        break
                    assert not live.done(), live
                    assert asyncio.get_running_loop().time() < deadline, (status, got)
                    await asyncio.sleep(0.05)
            finally:
                live.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await live
