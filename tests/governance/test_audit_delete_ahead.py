"""A governed delete on an engine that writes its audit entry first (S3, a Redis
Cluster: no commit over two streams) deletes only the head its entry names.

The entry is written ahead, naming the head event the delete removes; an append landing
between the entry and the delete used to be deleted with the stream, so the log named a
head one lower than what was erased. The delete is conditional on the named head (as
the entry-with-the-change engines' is): a moved head voids the entry, and the delete is
tried again on the new head, with an entry naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.backends.base import Backend
from statekeeper.governance import Audit, AuditLog, parse_policy

from ..backends._services import moto_endpoint, s3_credentials
from ..backends.test_s3 import bucket as bucket
from .conftest import KEYRING, POLICY_TEXT


def _interlope(backend: Backend, peer: StateStore) -> None:
    """Another writer appends once right before the delete reaches the engine."""
    armed = [peer]
    for name in ("delete_agent", "delete_agent_at"):
        inner = getattr(backend, name)

        async def call(agent_id: str, *args: Any, inner: Any = inner) -> bool:
            if armed:
                await armed.pop().save(agent_id, {"n": "late"})
            return bool(await inner(agent_id, *args))

        setattr(backend, name, call)


class _EntryFirst(MemoryBackend):
    """Memory without the commit over two streams: the entry goes first, as on S3."""

    appends_together = False


async def _late_append_is_named(backend: Backend, arm: Callable[[], None]) -> None:
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(
        backend, principal="ops", policy=policy, audit=Audit(), keyring=KEYRING
    ) as ops:
        assert not backend.appends_together
        await ops.save("acme/d", {"n": 1})
        await ops.save("acme/d", {"n": 2})
        arm()  # the next delete meets an append at seq 3
        assert await ops.delete("acme/d")
        assert await backend.head("acme/d") == 0
        log = AuditLog(backend, KEYRING)
        deletes = [e async for e in log.entries(operation="delete")]
        named = [e.detail["ahead"]["gone"][0] for e in deletes if "ahead" in e.detail]
        assert named[-1] == 3, deletes  # the head it erased, not the one before
        report = await log.verify()
        assert report.ok, report.problems


async def _check(backend: Backend) -> None:
    policy = parse_policy(POLICY_TEXT)  # the other writer is audited too
    peer = StateStore(backend, principal="ops", policy=policy, audit=Audit(), keyring=KEYRING)

    await _late_append_is_named(backend, lambda: _interlope(backend, peer))


async def test_a_delete_written_ahead_names_the_head_it_erases() -> None:
    await _check(_EntryFirst())


@pytest.mark.slow  # through a moto S3 server
async def test_on_s3_a_delete_names_the_head_it_erases(bucket: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    from statekeeper.backends.s3 import S3Backend

    await _check(
        S3Backend(
            bucket, "agents", endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
        )
    )
