"""Two runs on one migration journal at the same time (two ``statekeeper migrate`` of one
model, the CLI's default journal): each wrote its own record over the other's, page
after page, without a word. The second now refuses at once (``JournalBusy``, nothing
written); a run whose process died holds nothing, so the next run resumes it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import JournalBusy, MigrationError, NotOwned
from statekeeper.schema.migrate import Journal, migrate

from . import apps
from .test_journal_in_use import _populate, _versions
from .test_migrate_cli import _cli
from .test_migrate_cli import _populate as _cli_populate


async def test_a_second_run_on_a_journal_in_use_is_refused(tmp_path: Path) -> None:
    journal = tmp_path / "statekeeper-migrate-support.json"
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as first_store, StateStore(url) as second_store:
        await _populate(first_store, 5)
        started, go_on = asyncio.Event(), asyncio.Event()
        count = first_store.count_agents

        async def held_count() -> int:  # the first run, paused once it has begun
            started.set()
            await go_on.wait()
            return await count()

        first_store.count_agents = held_count  # type: ignore[method-assign]
        first = asyncio.create_task(migrate(first_store, apps.support_v2, journal=journal))
        await started.wait()
        with pytest.raises(JournalBusy) as caught:
            await migrate(second_store, apps.support_v2, journal=journal)
        error = caught.value
        assert isinstance(error, MigrationError) and error.journal == str(journal)
        assert f"pid {os.getpid()}" in error.holder and "in use by a running" in str(error)
        assert await _versions(second_store, 5) == {1}  # nothing written by the second
        go_on.set()
        report = await first
        assert report.changed == 5
        record = Journal.load(journal)
        assert record is not None and record.run_id == report.run_id and record.done
        # the first run ended: the journal is free again (the same run, re-checked)
        again = await migrate(second_store, apps.support_v2, journal=journal)
        assert again.run_id == report.run_id and again.changed == 0
        # a dry run writes no journal and is never refused
        assert (await migrate(second_store, apps.support_v2, journal=journal, dry_run=True)).ok


HOLDER = """
import sys
from pathlib import Path
from statekeeper.schema.running import journal_held
with journal_held(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_run_whose_process_died_blocks_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _cli_populate(url, 3)
    journal = tmp_path / "j.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(journal)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        refused = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2",
                       "--journal", str(journal), "--json")  # fmt: skip
        assert refused.returncode != 0
        message = " ".join(refused.stderr.split())
        assert "in use by a running migration" in message and f"pid {holder.pid}" in message
        assert Journal.load(journal) is None  # nothing written
    finally:
        holder.send_signal(signal.SIGKILL)  # the holder crashes: the OS drops its lock
        holder.wait()
    done = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2",
                "--journal", str(journal), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = Journal.load(journal)
    assert record is not None and record.done


async def test_a_foreign_file_where_the_lock_goes_is_left_untouched(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    foreign = tmp_path / "j.json.lock"
    foreign.write_text("my notes\n")
    async with StateStore("memory://") as store:
        await _populate(store, 2)
        with pytest.raises(NotOwned):
            await migrate(store, apps.support_v2, journal=journal)
        assert foreign.read_text() == "my notes\n" and Journal.load(journal) is None
        foreign.unlink()
        assert (await migrate(store, apps.support_v2, journal=journal)).changed == 2
        assert (await migrate(store, apps.support_v2, journal=journal)).changed == 0  # reused
