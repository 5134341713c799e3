"""Two S3 stores in one bucket, one's prefix inside the other's (``p`` and ``p/a``):
neither lists, counts or deletes the other's objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.testing import request

from ._services import moto_endpoint, s3_credentials
from .test_s3 import bucket as bucket

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


def _store(bucket: str, prefix: str) -> S3Backend:
    return S3Backend(
        bucket, prefix, endpoint_url=moto_endpoint(), create_bucket=True, **s3_credentials()
    )


@pytest.fixture
def stores(bucket: str) -> Iterator[tuple[S3Backend, S3Backend]]:
    yield _store(bucket, "p"), _store(bucket, "p/a")


async def test_a_store_nested_in_another_keeps_its_agents(
    stores: tuple[S3Backend, S3Backend],
) -> None:
    outer, inner = stores
    try:
        await inner.initialize()
        await inner.append(request("x", 0, 2, key="k"))
        await inner.set_marker("m")
        await outer.append(request("y", 0, 1))
        # was: ValueError (non-hexadecimal number found in fromhex() arg): the inner
        # store's "p/a/a/78/..." read as the outer store's agent "a"
        assert [i.agent_id for i in await outer.list_agents()] == ["y"]
        assert [i.agent_id for i in await inner.list_agents()] == ["x"]
        # was: 2, and every object of the inner store deleted with the outer's
        assert await outer.drop_all() == 1
        assert await inner.head("x") == 2
        assert await inner.read_marker("m") is True
        assert (await inner.lookup_key("x", "k")) is not None
        assert [i.agent_id for i in await inner.list_agents()] == ["x"]
        assert await outer.list_agents() == []
    finally:
        await outer.close()
        await inner.close()


async def test_deleting_an_agent_keeps_a_store_nested_in_its_objects(
    stores: tuple[S3Backend, S3Backend],
) -> None:
    """A store whose prefix is an agent's root of another (``p/a/6161``: agent "aa")."""
    outer, _ = stores
    nested = S3Backend(outer.bucket, "p/a/6161", endpoint_url=moto_endpoint(), **s3_credentials())
    try:
        await outer.append(request("aa", 0, 1))
        await nested.append(request("z", 0, 3))
        assert await outer.delete_agent("aa") is True
        assert await outer.head("aa") == 0
        # was: 0, the nested store's objects deleted as the agent's
        assert await nested.head("z") == 3
        assert [i.agent_id for i in await nested.list_agents()] == ["z"]
    finally:
        await outer.close()
        await nested.close()
