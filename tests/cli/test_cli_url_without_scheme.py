"""A store given without a URL's scheme (or with it mistyped) was taken for a SQLite
path, password and all: ``statekeeper init "host=db dbname=app password=PW"`` created
a SQLite file of that name in the current folder and printed ``Created an empty
statekeeper store at host=db dbname=app password=PW``; ``--db postgresql:/u:PW@h/db``
(one slash) and ``--db u:PW@h/db`` were quoted whole in their errors. Each is refused
as no URL, nothing created, the password masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.backends import open_backend
from statekeeper.backends.redact import mask_url
from statekeeper.errors import ConfigurationError

from ._proc import cli_env, run_in_process

PW = "Pw-noscheme-Rk29Lq"

GIVEN = [
    f"host=127.0.0.1 dbname=test password={PW}",
    f"postgresql:/app:{PW}@db.invalid/agents",
    f"postgresql//app:{PW}@db.invalid/agents",
    f"redis:/:{PW}@cache.invalid/0",
    f"app:{PW}@db.invalid/agents",
    f"app:{PW}@db.invalid",
]


@pytest.mark.parametrize("given", GIVEN)
def test_it_is_masked_and_refused(given: str) -> None:
    assert PW not in mask_url(given)
    with pytest.raises(ConfigurationError, match="is not a URL") as info:
        open_backend(given)
    assert PW not in str(info.value)


@pytest.mark.parametrize("path", ["agents.db", "a@b.db", "x:y.db", "dir/x:y.db"])
def test_paths_stay_paths(path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    assert mask_url(path) == path
    backend = open_backend(path)
    assert type(backend).__name__ == "SQLiteBackend"
    asyncio.run(backend.close())


@pytest.mark.parametrize("given", [GIVEN[0], GIVEN[5]])
def test_init_creates_no_file_and_prints_no_password(given: str, tmp_path: Path) -> None:
    code, out, err = run_in_process(("init", given), cli_env(200), cwd=tmp_path)
    assert code == 2, out + err
    assert PW not in out + err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("given", GIVEN)
def test_a_command_says_it_without_the_password(given: str, tmp_path: Path) -> None:
    code, out, err = run_in_process(("--db", given, "agents"), cli_env(200), cwd=tmp_path)
    assert code == 2, out + err
    assert PW not in out + err
    assert list(tmp_path.iterdir()) == []
