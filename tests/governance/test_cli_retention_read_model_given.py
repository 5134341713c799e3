"""``retention apply --read-model FILE`` names the projections of FILE still behind the
events it removes; a FILE that is not a read-model file (a typo, another application's
database, a text file) was read as "no projections": the run removed history and said
nothing about any projection — the check the option was given for passed unseen. Now
it is refused (exit 2) before anything is removed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeeper import SyncStateStore

from ..cli._subprocess import cli_in_process, one_error_line


@pytest.mark.parametrize("what", ["missing", "other-app", "text"])
def test_a_given_read_model_that_is_not_one_is_refused_first(tmp_path: Path, what: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as store:
        for n in range(3):
            store.save("a", {"n": n})
    given = tmp_path / "read-models.db"
    if what == "other-app":
        with sqlite3.connect(given) as db:
            db.execute("CREATE TABLE t (x)")
    elif what == "text":
        given.write_text("notes\n")
    before = given.read_bytes() if given.exists() else None
    run = cli_in_process(
        "retention", "apply", "--db", url, "--rule", "* keep_last=1", "--read-model", str(given)
    )
    assert run.code == 2, str(run)
    assert str(given) in one_error_line(run)
    with SyncStateStore(url) as store:
        assert store.stored_size("a").events == 3  # nothing removed
    assert (given.read_bytes() if given.exists() else None) == before
