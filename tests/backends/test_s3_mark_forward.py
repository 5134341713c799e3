"""S3's high-water mark (``a/<hex id>/h/mark``: incarnation and head, written after each
commit) only moves forward. Writer A commits seq 6 and B seq 7; B writes mark 7, then
A's late mark 6 lands: it took the mark back to 6, and a later loss of commit 7 (deleted
by something other than the store) went untold — the head read 6, the next save reused
seq 7, an acknowledged write gone. The mark is now a PUT conditional on the mark read
before (If-Match its ETag; If-None-Match when there was none): A's late one is refused
and, finding 7 there, kept. The interleaving is made exact with a hook on A's PUT."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import IntegrityError

from ._services import fresh_url

pytestmark = pytest.mark.slow


def _mark(backend: Any, agent_id: str) -> dict[str, str]:
    key = backend._agent_root(agent_id) + "h/mark"
    return dict(backend._s3.head_object(Bucket=backend.bucket, Key=key)["Metadata"])


async def test_a_late_mark_does_not_take_it_back(tmp_path: Path) -> None:
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url) as a, StateStore(url) as b:
            for i in range(5):
                await a.save("x", {"i": i})
            loop = asyncio.get_running_loop()
            backend: Any = a.backend
            s3 = backend._s3
            real_put = s3.put_object
            armed = [True]

            def put(**kw: Any) -> Any:  # A's mark 6: B's commit 7 and mark 7 land first
                if armed[0] and kw["Key"].endswith("h/mark"):
                    armed[0] = False
                    asyncio.run_coroutine_threadsafe(b.save("x", {"i": "b"}), loop).result()
                return real_put(**kw)

            backend._s3 = type("Hooked", (), {"__getattr__": lambda _, n: getattr(s3, n)})()
            backend._s3.put_object = put
            try:
                await a.save("x", {"i": "a"})
            finally:
                backend._s3 = s3
            assert not armed[0]
            assert _mark(backend, "x")["last"] == "7"
            # commit 7 deleted by something else: told, not its seq reused
            s3.delete_object(Bucket=backend.bucket, Key=backend._agent_root("x") + f"e/{7:020d}")
        async with StateStore(url) as fresh:
            with pytest.raises(IntegrityError, match=r"events 7\.\.7 are missing"):
                await fresh.save("x", {"i": "lost?"})
