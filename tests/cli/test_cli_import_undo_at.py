"""The undo a failed ``statekeeper import`` suggests deletes only what the import wrote.

When the import cannot delete again the agent it wrote (a legal hold, a principal not
allowed to delete), its message said ``(undo: statekeeper delete alpha --yes)``: run
later, after another process wrote the agent (or deleted it and made it again, even up
to the same seq), that command deleted the other process's acknowledged writes. The
undo now names the head event the import wrote — ``statekeeper delete alpha --at
SEQ:MARK --yes`` (its seq and identity mark) — and ``delete --at`` deletes only while
the head is that event, else refuses (``HeadMoved``, exit code 1), nothing deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.records import RewriteRequest
from statekeeper.store.delete_shown import head_identity, identity_mark

_UNDO = re.compile(r"\(undo: (statekeeper delete alpha --at \d+:[0-9a-f]{16} --yes)\)")


def _held_import(runner: CliRunner, url: str, tmp_path: Path) -> tuple[str, str]:
    """A failed import of ``alpha`` (its end line lies) onto a store holding it: the
    agent is kept, and the undo suggested. ``(target url, the undo's command)``."""
    exported = tmp_path / "alpha.jsonl"
    assert runner.invoke(app, ["export", "alpha", "--db", url, "-o", str(exported)]).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    del lines[-1]["complete"]["sha256"]  # edited by hand: no digest (as an older export)
    next(line for line in lines if "end" in line)["state"] = "completed"
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert runner.invoke(app, ["init", target]).exit_code == 0
    held = runner.invoke(app, ["hold", "add", "alpha", "--reason", "a matter", "--db", target])
    assert held.exit_code == 0, held.output
    result = runner.invoke(app, ["import", str(edited), "--db", target])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "the agent is stored as the file's events say: deleting it again failed" in said
    found = _UNDO.search(said)
    assert found is not None, said
    released = runner.invoke(app, ["hold", "remove", "alpha", "--db", target])
    assert released.exit_code == 0, released.output
    return target, found.group(1)


def _run(runner: CliRunner, command: str, target: str) -> object:
    argv = shlex.split(command)[1:]  # (without "statekeeper")
    return runner.invoke(app, [*argv, "--db", target])


def _data(runner: CliRunner, target: str) -> object:
    shown = runner.invoke(app, ["show", "alpha", "--db", target, "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)["data"]


@pytest.mark.parametrize("since", ["written", "made_again"])
def test_the_suggested_undo_keeps_another_process_s_writes(
    runner: CliRunner, url: str, tmp_path: Path, since: str
) -> None:
    target, undo = _held_import(runner, url, tmp_path)

    async def other_process() -> int:
        async with StateStore(target) as other:
            head = await other.head("alpha")
            if since == "written":
                await other.save("alpha", {"theirs": 1})
            else:  # deleted and written again up to the seq the import wrote
                await other.delete("alpha")
                await other.create("alpha", {"theirs": 1})
                for n in range(2, head + 1):
                    await other.save("alpha", {"theirs": n})
                assert await other.head("alpha") == head
            return await other.head("alpha")

    head = asyncio.run(other_process())
    result = _run(runner, undo, target)
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    said = " ".join(result.stderr.split())  # type: ignore[attr-defined]
    assert "not deleted — its head is no longer the one named" in said
    if since == "made_again":
        assert (
            f"deleted and made again since, up to the same seq (another stream, head seq {head})"
            in said
        )
    else:
        assert f"written since (head seq {head})" in said
    assert _data(runner, target) == {"theirs": 1 if since == "written" else head}


def test_the_suggested_undo_deletes_what_the_import_wrote(
    runner: CliRunner, url: str, tmp_path: Path
) -> None:
    """Control: nothing written since: the exact command suggested deletes the agent."""
    target, undo = _held_import(runner, url, tmp_path)
    result = _run(runner, undo, target)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "deleted agent 'alpha'" in result.stdout  # type: ignore[attr-defined]
    shown = runner.invoke(app, ["show", "alpha", "--db", target])
    assert shown.exit_code == 1 and "not found" in shown.output


@pytest.mark.parametrize(
    "bad",
    [
        "4",
        "x:0123456789abcdef",
        "0:0123456789abcdef",
        "4:abc",
        # (not ASCII digits: "²" crashed int() as an internal error, exit 70; "٣" read
        # as seq 3) and a seq no engine stores (an engine's error, not the option's)
        "\u00b2:0123456789abcdef",
        "\u0663:0123456789abcdef",
        "9223372036854775808:0123456789abcdef",
        " 4:0123456789abcdef",
        "4:0123456789abcdef\n",
    ],
)
def test_a_malformed_at_is_refused_naming_it(runner: CliRunner, url: str, bad: str) -> None:
    result = runner.invoke(app, ["delete", "alpha", "--at", bad, "--yes", "--db", url])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "--at takes SEQ:MARK" in said and repr(bad) in said
    assert runner.invoke(app, ["show", "alpha", "--db", url]).exit_code == 0  # kept


def test_a_head_below_the_seq_named_is_another_stream(runner: CliRunner, url: str) -> None:
    """A head never goes back: an agent whose head is below the seq named was deleted
    and made again (another stream) — not "written since", as the refusal said."""
    result = runner.invoke(
        app, ["delete", "alpha", "--at", "9:0123456789abcdef", "--yes", "--db", url]
    )
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "not deleted — its head is no longer the one named (seq 9, 0123456789abcdef)" in said
    assert "deleted and made again since (another stream, head seq 4)" in said
    assert "written since" not in said
    assert runner.invoke(app, ["show", "alpha", "--db", url]).exit_code == 0  # kept


def test_a_head_rewritten_in_place_is_refused_saying_so(runner: CliRunner, url: str) -> None:
    """A migration or a rekey rewrites the head event in place (another stored checksum:
    another identity mark): the named head is refused — not said to be a stream
    "deleted and made again" only."""

    async def rewrite_the_head() -> str:
        async with StateStore(url) as store:
            identity = await head_identity(store, "alpha")
            assert identity is not None
            seq = identity[0]
            [head] = await store.backend.read("alpha", seq - 1, seq)
            tag = (await store.backend.head_tag("alpha"))[1]
            moved = dataclasses.replace(head, checksum=b"rewritten" + head.checksum)
            await store.backend.rewrite(RewriteRequest("alpha", seq, tag, [moved], (), tag))
            return f"{seq}:{identity_mark(identity)}"

    at = asyncio.run(rewrite_the_head())
    result = runner.invoke(app, ["delete", "alpha", "--at", at, "--yes", "--db", url])
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "or its records rewritten in place (a migration, a rekey)" in said

    async def kept() -> int:
        async with StateStore(url) as store:
            return await store.backend.head("alpha")

    assert asyncio.run(kept()) == 4  # nothing deleted
