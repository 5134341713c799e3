"""``prune_retention(..., up_to=<checkpoint id>)``: retention of the checkpoints a user
was shown (the inspector's thread page): ``keep_last`` counts among those up to that
id, newer ones are kept, and a thread with a newer checkpoint never expires whole."""

from __future__ import annotations

import time

from .conftest import Api, Chain, config


async def _steps(api: Api, thread_id: str) -> list[int]:
    return [t.checkpoint["channel_values"]["i"] for t in await api.list(config(thread_id))]


async def test_keep_last_counts_up_to_the_checkpoint_shown(api: Api) -> None:
    chain = Chain(api)
    for i in range(4):
        await chain.step({"i": i})
    shown = (await api.list(config(chain.thread_id)))[0].config["configurable"]["checkpoint_id"]
    for i in range(4, 6):  # written after the page was shown
        await chain.step({"i": i})
    report = await api.prune_retention([chain.thread_id], keep_last=1, up_to=shown)
    assert report.checkpoints_deleted == 3
    assert await _steps(api, chain.thread_id) == [5, 4, 3]
    # without up_to: counted from the newest now
    report = await api.prune_retention([chain.thread_id], keep_last=1)
    assert await _steps(api, chain.thread_id) == [5]


async def test_a_thread_with_a_checkpoint_after_the_one_shown_does_not_expire(api: Api) -> None:
    chain = Chain(api)
    await chain.step({"i": 0})
    shown = (await api.list(config(chain.thread_id)))[0].config["configurable"]["checkpoint_id"]
    await chain.step({"i": 1})
    now = time.time() + 3600  # everything is older than the ttl
    report = await api.prune_retention([chain.thread_id], ttl=60, now=now, up_to=shown)
    assert report.threads_deleted == 0
    assert await _steps(api, chain.thread_id) == [1, 0]  # the newest up to it is kept too
