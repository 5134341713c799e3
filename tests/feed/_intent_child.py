"""Child process of ``test_intent_owner_alive.py``: a delete (or forget) of one agent
that stops itself (``SIGSTOP``) once its feed intent is written, before the delete (the
key's destruction), and, once continued, dies (``os._exit``) after that step, before
the tombstone's append.

``python _intent_child.py ENGINE DIR AGENT``; ENGINE: ``tiered`` or ``split`` (a delete
through an intent) or ``forget-sqlite`` / ``forget-tiered`` (a forget).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring

TOMBSTONES = "\x01sk-feed/deleted"


def backend(engine: str, where: Path) -> Backend:
    """The engine both processes open."""
    if engine.endswith("tiered"):
        return TieredBackend(SQLiteBackend(str(where / "t.db")), hot=MemoryBackend())
    found = SQLiteBackend(str(where / "s.db"))
    if engine == "split":
        found.appends_together = False  # as an engine with no commit of two streams
    return found


def keyring(where: Path) -> Keyring:
    return Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(str(where / "vault.db")))


async def main(engine: str, where: Path, agent_id: str) -> None:
    from statekeeper.governance.shredding import forget

    store = StateStore(backend(engine, where), keyring=keyring(where))
    inner = store.backend
    real_append = inner.append

    async def append(request: Any) -> Any:
        if request.agent_id.startswith(TOMBSTONES):
            os._exit(17)  # dies after the delete (the key's destruction), before this
        return await real_append(request)

    inner.append = append  # type: ignore[method-assign]
    if engine.startswith("forget"):
        ring = store.codec.keyring
        assert ring is not None
        real_forget = ring.forget_in

        def forget_in(*args: Any, **kwargs: Any) -> Any:
            os.kill(os.getpid(), signal.SIGSTOP)  # the intent is written: stop here
            return real_forget(*args, **kwargs)

        ring.forget_in = forget_in  # type: ignore[method-assign]
        await forget(store, agent_id)
    else:
        real_delete = inner.delete_agent

        async def delete_agent(target: str) -> bool:
            if target == agent_id:
                os.kill(os.getpid(), signal.SIGSTOP)  # the intent is written: stop here
            return await real_delete(target)

        inner.delete_agent = delete_agent  # type: ignore[method-assign, assignment]
        await store.delete(agent_id)
    os._exit(3)  # (not reached: the tombstone's append ends it)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
