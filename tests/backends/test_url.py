"""Choosing a backend by URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend, open_backend
from statekeeper.errors import ConfigurationError


def _close(backend: object) -> None:
    asyncio.run(backend.close())  # type: ignore[attr-defined]


def test_memory_url() -> None:
    backend = open_backend("memory://")
    assert isinstance(backend, MemoryBackend)
    _close(backend)


def test_sqlite_absolute_path_and_options(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "abs.db"
    backend = open_backend(f"sqlite:///{path}?synchronous=normal&busy_timeout=2.5")
    try:
        assert isinstance(backend, SQLiteBackend)
        assert backend.path == str(path)
        assert backend.synchronous == "NORMAL"
        assert backend.busy_timeout == 2.5
        assert path.exists()
    finally:
        _close(backend)


def test_sqlite_relative_path_and_bare_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rel = open_backend("sqlite:///rel.db")
    bare = open_backend("bare.db")
    try:
        assert isinstance(rel, SQLiteBackend) and rel.path == "rel.db"
        assert isinstance(bare, SQLiteBackend) and bare.path == "bare.db"
        assert (tmp_path / "rel.db").exists() and (tmp_path / "bare.db").exists()
    finally:
        _close(rel)
        _close(bare)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://host/x",
        "sqlite://",
        "sqlite:///x.db?busy_timeout=soon",
        "sqlite:///x.db?journal=off",
        "sqlite:///x.db?synchronous=sometimes",
    ],
)
def test_bad_urls_are_configuration_errors(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError):
        open_backend(url)
    assert not (tmp_path / "x.db").exists()
