"""``statekeeper --as PRINCIPAL import`` of events the file names no actor for.

A store opened as a principal names the writer of every event that names none (the
stream says who wrote it): the imported events read back with the principal as their
actor, and the import's read-back compared them with the file's lines as they are —
"imported event differs from the file", the agent deleted again, exit 2, for every
import as a principal of an export made without one (the common case). Now the
read-back (and ``--skip-existing``'s and a resumed import's comparison) takes the file's
line as the store writes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app

POLICY = '[principals.ops]\nadmin = ["**"]\n'


def test_an_import_as_a_principal_keeps_events_without_an_actor(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    target = f"sqlite:///{tmp_path / 'target.db'}"

    async def written() -> None:
        async with StateStore(source) as store:
            for n in range(3):
                await store.save("acme/a", {"n": n})
            await store.save("acme/b", {"n": 0}, actor="alice")  # (named: kept as named)

    asyncio.run(written())
    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    runner = CliRunner()
    exported = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["export", "--db", source, "-o", str(exported)]).exit_code == 0
    assert runner.invoke(app, ["init", target]).exit_code == 0
    as_ops = ["--as", "ops", "--policy", str(tmp_path / "policy.toml")]
    result = runner.invoke(app, [*as_ops, "import", str(exported), "--db", target])
    assert result.exit_code == 0, result.output
    assert "imported 2 agent(s), 4 event(s); verified" in result.output

    async def read_back() -> None:
        async with StateStore(target) as store:
            assert (await store.load("acme/a")).data == {"n": 2}
            assert [e.actor async for e in store.history("acme/a")] == ["ops"] * 3
            assert [e.actor async for e in store.history("acme/b")] == ["alice"]

    asyncio.run(read_back())
    again = runner.invoke(
        app, [*as_ops, "import", str(exported), "--db", target, "--skip-existing"]
    )
    assert again.exit_code == 0, again.output
    assert "skipped 2 existing agent(s)" in again.output
