"""``langgraph import`` / ``export`` took a PostgreSQL URL whose password holds an
unencoded ``/ ? # [ ]`` that every other command refuses.

``statekeeper langgraph export store.db 'postgresql://u:p#w@db/x'`` connected (libpq
reads the ``#`` as part of the password) and wrote there, while ``statekeeper agents
--db`` with the same URL exits 2: "the password in '…' holds a character URLs reserve
…: percent-encode it". With ``?schema=`` after the ``#`` the query was not even
seen as one (libpq refused ``schema``; a schema meant to be private was not used).
Both sides of a copy now follow the store's rule and say the same thing, before
anything is opened. Each case here is read-only on main too (a dry run, an import's
source, a database that does not exist)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from statekeeper.backends import open_backend
from statekeeper.errors import ConfigurationError

from ..backends._services import POSTGRES_DSN, require_postgres

pytest.importorskip("langgraph.checkpoint.postgres")
pytest.importorskip("langgraph.checkpoint.sqlite")


def _with_password(password: str, database: str | None = None) -> str:
    parts = urlsplit(POSTGRES_DSN)
    path = f"/{database}" if database else parts.path
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"postgresql://{parts.username or 'postgres'}:{password}@{host}{path}"


def _the_stores_refusal(url: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        open_backend(url)
    return str(info.value)


@pytest.fixture
def store(tmp_path: Path) -> str:
    from statekeeper import SyncStateStore

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with SyncStateStore(url):
        pass
    return url


@pytest.mark.parametrize("password", ["p#w", "a/b", "p?q"])
def test_the_cli_refuses_it_as_the_store_does(store: str, password: str) -> None:
    from tests.cli._proc import cli_env, run_in_process

    require_postgres()
    url = _with_password(password)
    refusal = _the_stores_refusal(url)
    for args in (
        ("langgraph", "export", "--dry-run", store, url),
        ("langgraph", "import", url, store),
        ("langgraph", "import", "--dry-run", url, store),
    ):
        code, stdout, stderr = run_in_process(args, cli_env(400))
        assert code == 2, (args, stdout, stderr)
        assert " ".join(stderr.split()) == f"error: {refusal}", stderr
        assert password not in stdout + stderr


def test_the_library_refuses_it_before_opening_either_side(tmp_path: Path, store: str) -> None:
    from statekeeper.integrations.langgraph.migrate import export_threads, import_threads

    url = _with_password("p#w", "sk_no_such_database")  # nothing there to connect to
    refusal = _the_stores_refusal(url)
    with pytest.raises(ConfigurationError) as info:
        export_threads(store, url)
    assert str(info.value) == refusal
    with pytest.raises(ConfigurationError) as info:
        import_threads(url, store)
    assert str(info.value) == refusal
    with pytest.raises(ConfigurationError) as info:  # (the store side: as before)
        export_threads(url, f"sqlite:///{tmp_path / 'lg.db'}")
    assert str(info.value) == refusal
    assert not (tmp_path / "lg.db").exists()
