"""``langgraph import`` into a URL that holds no statekeeper store names the fix,
``statekeeper init URL``, once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process, one_error_line

pytest.importorskip("langgraph.checkpoint.sqlite")


@pytest.mark.parametrize("engine", ["redis", "postgresql"])
def test_the_init_hint_is_said_once(engine: str, tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    from langgraph.checkpoint.sqlite import SqliteSaver

    source = tmp_path / "lg.sqlite"
    with closing(sqlite3.connect(source, check_same_thread=False)) as conn:
        SqliteSaver(conn).setup()
    with fresh_url(engine, tmp_path) as url:
        run = cli_in_process("langgraph", "import", str(source), url)
        assert run.code == 2, str(run)
        line = one_error_line(run)
        assert line.count("statekeeper init") == 1, line
