"""A durable step on a write-behind (``durability="async"``) store is recorded — its
record committed — when ``run`` returns, as on every other store: write-behind
acknowledged the record on buffering, so a crash after ``run`` returned lost it, and the
step, its side effect already done, ran again on recovery."""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore
from statekeeper.concurrency.steps import Steps


async def test_a_step_on_a_write_behind_store_is_committed_when_run_returns(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    calls: list[str] = []

    def effect(name: str) -> dict[str, str]:
        calls.append(name)
        return {"done": name}

    # nothing flushes by itself during the test: no size nor time limit is reached
    async with StateStore(url, durability="async", flush_size=10_000, flush_interval=3600) as a:
        await Steps(a, "order").run("charge", effect, "charge")
        agent = await a.agent("mail", initial_data={"to": "x"})
        agent.data["sent"] = True
        await Steps(agent).run("send", effect, "send")
        # another process (a second store on the file) sees both records committed
        async with StateStore(url) as b:
            assert (await Steps(b, "order").recorded("charge")) is not None
            assert (await Steps(b, "mail").recorded("send")) is not None
            assert (await b.load("mail")).data == {"to": "x", "sent": True}
            # recovery there does not run the steps again
            assert await Steps(b, "order").run("charge", effect, "again") == {"done": "charge"}
    assert calls == ["charge", "send"]
