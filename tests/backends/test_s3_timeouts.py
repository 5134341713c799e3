"""S3 request timeouts, and what ``drop_all`` counts.

botocore waits 60 s for a connection and 60 s for each answer, four attempts: a server
that accepts and never answers blocked a call for minutes, and the S3 backend had no
option to say otherwise. ``drop_all`` returned how many objects it deleted, where
SQLite, memory and Redis return how many agents there were."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("boto3")

from statekeeper.backends.s3 import S3Backend
from statekeeper.backends.url import open_backend
from statekeeper.errors import BackendUnavailable, ConfigurationError
from statekeeper.testing import request

from ._services import SilentServer, fresh_url


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _frozen(server: SilentServer, **options: float) -> S3Backend:
    return S3Backend(
        "bucket",
        endpoint_url=f"http://127.0.0.1:{server.port}",
        region_name="us-east-1",
        aws_access_key_id="test-key-id",
        aws_secret_access_key="test-secret-value",
        **options,
    )


async def test_a_frozen_endpoint_fails_within_the_timeouts(silent: SilentServer) -> None:
    backend = _frozen(silent, connect_timeout=0.5, read_timeout=0.5)
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailable, match=f"127.0.0.1:{silent.port}") as caught:
            await backend.head("a")
    finally:
        await backend.close()
    elapsed = time.monotonic() - started
    # four attempts of 0.5 s and botocore's back-off between them (< 1 + 2 + 4 s), with
    # room for a loaded machine; the defaults before took 4 x 60 s
    assert elapsed < 30, elapsed
    assert "read_timeout" in str(caught.value)
    assert "test-secret-value" not in str(caught.value)
    assert silent.attempts_since(0) >= 1


async def test_timeouts_from_the_url(silent: SilentServer) -> None:
    url = (
        f"s3://bucket/p?endpoint_url=http://127.0.0.1:{silent.port}"
        "&region=us-east-1&connect_timeout=0.5&read_timeout=0.25"
    )
    backend = open_backend(url)
    assert isinstance(backend, S3Backend)
    config = backend._s3.meta.config
    assert (config.connect_timeout, config.read_timeout) == (0.5, 0.25)
    await backend.close()
    default = S3Backend("bucket", region_name="us-east-1")
    config = default._s3.meta.config
    assert (config.connect_timeout, config.read_timeout) == (5.0, 15.0)
    await default.close()
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ConfigurationError, match="read_timeout"):
            open_backend(f"s3://bucket?read_timeout={bad}")


@pytest.mark.slow  # moto's S3 server over HTTP
async def test_drop_all_counts_agents_not_objects(tmp_path: Path) -> None:
    with fresh_url("s3", tmp_path) as url:
        backend = open_backend(url)
        try:
            for agent_id in ("a", "b", "c"):
                for seq in range(4):
                    await backend.append(request(agent_id, seq, key=f"k{seq}"))
            assert await backend.drop_all() == 3
            assert await backend.count_agents() == 0
            assert await backend.drop_all() == 0
        finally:
            await backend.close()
