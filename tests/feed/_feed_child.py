"""Child process of the multi-process feed tests.

* ``write URL NAME COUNT``: save COUNT events to the agents ``NAME/agent-0..2``, then
  print ``done``.
* ``follow URL OUT``: subscribe from the position of the last complete line of the
  file OUT (the start when there is none) and append one line ``cursor agent seq`` per
  event, ``cursor`` the subscription's resume point after it (``str(FeedCursor)``: one
  position per shard on a sharded store); a line cut short by a kill is dropped on the
  next start. Runs until killed.
* ``project URL READ_MODEL``: run the built-in projections live until killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

from statekeeper import StateStore


async def write(url: str, name: str, count: int) -> None:
    async with StateStore(url) as store:
        for i in range(count):
            await store.save(f"{name}/agent-{i % 3}", {"i": i})
    print("done", flush=True)


def resume_point(path: str) -> str | int:
    """The last complete line's cursor; a torn last line is cut off."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        keep = data[: data.rfind(b"\n") + 1]
        if len(keep) != len(data):
            f.truncate(len(keep))
    lines = keep.splitlines()
    return lines[-1].split()[0].decode() if lines else 0


async def follow(url: str, out: str) -> None:
    start = resume_point(out)
    async with StateStore(url) as store:
        with open(out, "a", encoding="utf-8") as f:  # noqa: ASYNC230 - small appends
            sub = store.subscribe(from_position=start, batch_size=5)
            async for change in sub:
                f.write(f"{sub.cursor} {change.agent_id} {change.seq}\n")
                f.flush()


async def project(url: str, read_model: str) -> None:
    from statekeeper.feed import ProjectionRunner

    async with StateStore(url) as store, ProjectionRunner(store, read_model, batch_size=4) as r:
        await r.run()


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    if mode == "write":
        asyncio.run(write(url, rest[0], int(rest[1])))
    elif mode == "follow":
        asyncio.run(follow(url, rest[0]))
    else:
        asyncio.run(project(url, rest[0]))
