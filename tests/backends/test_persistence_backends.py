"""The seed's ``StatePersistenceManager`` on every real engine: REDIS, POSTGRESQL, S3,
LOCAL, and the hybrid (a ``tiered://`` URL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StatePersistenceManager, StorageBackend
from statekeeper.backends import tiered_url

from ._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    moto_endpoint,
    namespace,
    require_postgres,
    require_redis,
    s3_credentials,
)


@pytest.fixture
def cleanup(tmp_path: Path) -> Iterator[list[Any]]:
    todo: list[Any] = []
    yield todo
    for fn in todo:
        fn()


def _setup(
    kind: StorageBackend, tmp_path: Path, cleanup: list[Any], monkeypatch: Any
) -> dict[str, Any]:
    name = namespace(tmp_path)
    if kind is StorageBackend.REDIS:
        pytest.importorskip("redis")
        require_redis()
        monkeypatch.setenv("STATEKEEPER_REDIS_URL", REDIS_URL)
        cleanup.append(lambda: delete_prefix(name + ":"))
        return {"backend_options": {"prefix": name + ":"}}
    if kind is StorageBackend.POSTGRESQL:
        pytest.importorskip("psycopg")
        require_postgres()
        monkeypatch.setenv("STATEKEEPER_POSTGRES_URL", f"{POSTGRES_DSN}?schema={name}")
        cleanup.append(lambda: drop_schema(name))
        return {}
    if kind is StorageBackend.S3:
        pytest.importorskip("boto3")
        bucket = namespace(tmp_path, "sk-t-")
        monkeypatch.setenv(
            "STATEKEEPER_S3_URL",
            f"s3://{bucket}/seed?endpoint_url={moto_endpoint()}&create_bucket=1",
        )
        from .test_s3 import _drop_bucket

        cleanup.append(lambda: _drop_bucket(bucket))
        return {"backend_options": s3_credentials()}
    return {"path": str(tmp_path / "local.db")}


@pytest.mark.parametrize(
    "kind",
    [StorageBackend.REDIS, StorageBackend.POSTGRESQL, StorageBackend.S3, StorageBackend.LOCAL],
    ids=lambda k: k.name,
)
async def test_the_seed_manager_on_every_backend(
    kind: StorageBackend, tmp_path: Path, cleanup: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = _setup(kind, tmp_path, cleanup, monkeypatch)
    state = {"messages": [{"role": "user", "content": "hi"}], "step": 1}
    async with StatePersistenceManager(kind, **options) as manager:
        assert manager.store.backend.name == {"LOCAL": "sqlite"}.get(kind.name, kind.value)
        for step in range(1, 6):
            assert await manager.save_state("agent-1", {**state, "step": step}) is True
        assert await manager.load_state("agent-1") == {**state, "step": 5}
        await manager.flush()
        assert manager.get_stats()["backend"] == kind.value
    async with StatePersistenceManager(kind, **options) as again:  # a new process, say
        assert await again.load_state("agent-1") == {**state, "step": 5}
        snap = await again.load_snapshot("agent-1")
        assert snap is not None and snap.version == 1 and len(snap.checksum) == 64
        assert await again.delete_state("agent-1") is True
        assert await again.load_state("agent-1") is None


async def test_the_seed_manager_on_the_hybrid(
    tmp_path: Path, cleanup: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    require_redis()
    require_postgres()
    name = namespace(tmp_path)
    cleanup.extend([lambda: delete_prefix(name + ":"), lambda: drop_schema(name)])
    url = tiered_url(hot=f"{REDIS_URL}?prefix={name}:", durable=f"{POSTGRES_DSN}?schema={name}")
    async with StatePersistenceManager(url=url, durability="group") as manager:
        for i in range(20):
            await manager.save_state(f"a{i}", {"i": i})
        assert [await manager.load_state(f"a{i}") for i in range(20)] == [
            {"i": i} for i in range(20)
        ]
        assert manager.store.backend.name == "tiered"


def test_engine_options_go_through_open_backend_and_are_refused_where_unsupported(
    tmp_path: Path,
) -> None:
    from statekeeper.backends import open_backend
    from statekeeper.errors import ConfigurationError

    for url in ("memory://", f"sqlite:///{tmp_path / 'a.db'}", str(tmp_path / "b.db")):
        with pytest.raises(ConfigurationError, match="engine options \\(schema\\)"):
            open_backend(url, options={"schema": "app"})
        with pytest.raises(ConfigurationError, match="engine options"):
            StatePersistenceManager(url=url, backend_options={"schema": "app"})
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_engine_options_reach_the_engine() -> None:
    pytest.importorskip("redis")
    from statekeeper.backends import open_backend

    backend = open_backend(REDIS_URL, options={"prefix": "sk-opt-test:"})
    assert backend.prefix == "sk-opt-test:"  # type: ignore[attr-defined]
