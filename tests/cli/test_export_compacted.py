"""``export`` / ``import`` of agents retention compacted (``keep_last``): the file
holds the state at the base and the events after it, and the import writes the agent
compacted at the same base, so every ``load`` the source answers (the base, each seq
after it) reads the same in the target, and the history before the base is
compacted there too. (Before: the export of a store holding such an agent failed on
HistoryCompacted, so the store could not be exported at all.)"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import Snapshot

from ..backends._services import fresh_url
from ._proc import ENGINES, sk_in_process

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def _fill(url: str) -> dict[str, list[Snapshot]]:
    """``kept`` (12 events, compacted to its last 3 at base 9) and ``whole`` (2
    events, kept whole); what ``load`` returns at each seq that can be loaded."""
    async with StateStore(url, snapshot_every=4) as store:
        for i in range(12):
            await store.save(
                "kept", {"i": i, "when": WHEN, "tags": {f"t{i % 2}"}}, fsm_state=f"s{i % 3}"
            )
        await store.save("whole", {"n": 1})
        await store.append("whole", "note", {"why": "kept whole"}, ops=[], idempotency_key="k1")
        report = await apply_retention(store, RetentionPolicy.parse("* keep_last=3\nhold whole"))
        assert [(a.agent_id, a.base_seq) for a in report.actions] == [("kept", 9)]
        return {
            "kept": [await store.load("kept", at_seq=s) for s in range(9, 13)],
            "whole": [await store.load("whole", at_seq=s) for s in (1, 2)],
        }


async def _loaded(url: str, want: dict[str, list[Snapshot]]) -> None:
    async with StateStore(url) as store:
        for agent_id, snaps in want.items():
            for snap in snaps:
                assert await store.load(agent_id, at_seq=snap.seq) == snap, (agent_id, snap.seq)
        with pytest.raises(HistoryCompacted) as caught:
            await store.load("kept", at_seq=8)
        assert caught.value.base_seq == 9
        assert [ev.seq async for ev in store.history("kept", after_seq=9)] == [10, 11, 12]
        assert (await store.verify()).ok


@pytest.mark.parametrize("engine", ENGINES)
def test_a_compacted_agent_exports_and_imports_as_it_loads(engine: str, tmp_path: Path) -> None:
    with (
        fresh_url(engine, tmp_path, "source.db") as source,
        fresh_url(engine, tmp_path / "t", "target.db") as target,
    ):
        (tmp_path / "t").mkdir(exist_ok=True)
        want = asyncio.run(_fill(source))
        file = tmp_path / "agents.jsonl"
        exported = sk_in_process("export", "--db", source, "-o", str(file))
        assert exported.returncode == 0, exported.stderr
        assert "exported 2 agent(s), 5 event(s)" in exported.stdout
        lines = [json.loads(line) for line in file.read_text().splitlines()]
        kept = [x for x in lines if "kept" in (x.get("agent_id"), x.get("base"), x.get("end"))]
        assert [x.get("seq") for x in kept] == [9, 10, 11, 12, 12]
        assert kept[0]["base"] == "kept" and kept[0]["state"] == "s2"
        assert kept[0]["data"]["i"] == 8
        assert sk_in_process("init", target).returncode == 0
        imported = sk_in_process("import", str(file), "--db", target, "--json")
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout)["events"] == 5
        asyncio.run(_loaded(target, want))
        again = sk_in_process("export", "--db", target)  # the same file again
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[1:] == file.read_text().splitlines()[1:]


def test_an_interrupted_import_of_a_compacted_agent_is_completed(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    want = asyncio.run(_fill(source))
    file = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", source, "-o", str(file)).returncode == 0
    lines = file.read_text().splitlines()
    parsed = [json.loads(line) for line in lines]
    # what an import stopped after kept's first event (seq 10) left in the target
    base = next(i for i, x in enumerate(parsed) if x.get("base") == "kept")
    end = {**parsed[base + 4], "seq": 10, "state": parsed[base + 1]["fsm"]}
    partial = tmp_path / "partial.jsonl"
    done = json.dumps({"complete": {"agents": 1, "events": 1}})
    partial.write_text("\n".join([lines[0], lines[base], lines[base + 1], json.dumps(end), done]))
    target = f"sqlite:///{tmp_path / 't.db'}"
    assert sk_in_process("init", target).returncode == 0
    first = sk_in_process("import", str(partial), "--db", target)
    assert first.returncode == 0, first.stderr
    again = sk_in_process("import", str(file), "--db", target, "--skip-existing", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["skipped"] == []
    asyncio.run(_loaded(target, want))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda x: {**x, "data": [1]}, "a base line needs base (the agent id), seq (1 or more)"),
        (lambda x: {**x, "seq": 0}, "a base line needs"),
        (lambda x: {**x, "seq": 7}, "agent 'kept' seq 10 (expected 8)"),
        (None, "agent 'kept' has a base but no event after it"),
    ],
)
def test_import_checks_a_base_line_before_writing(
    tmp_path: Path, change: object, message: str
) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    asyncio.run(_fill(source))
    good = sk_in_process("export", "--db", source).stdout.splitlines()
    parsed = [json.loads(line) for line in good]
    at = next(i for i, x in enumerate(parsed) if x.get("base") == "kept")
    if change is None:  # the base, then straight to the end line
        end = next(i for i, x in enumerate(parsed) if x.get("end") == "kept")
        content = [*good[: at + 1], json.dumps({**parsed[end], "seq": 9}), *good[end + 1 :]]
    else:
        assert callable(change)
        content = [*good[:at], json.dumps(change(parsed[at])), *good[at + 1 :]]
    file = tmp_path / "bad.jsonl"
    file.write_text("\n".join(content) + "\n")
    target = f"sqlite:///{tmp_path / 't.db'}"
    assert sk_in_process("init", target).returncode == 0
    result = sk_in_process("import", str(file), "--db", target)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    listed = sk_in_process("agents", "--db", target, "--json")
    assert json.loads(listed.stdout)["agents"] == []


async def test_a_compacted_agent_imports_encrypted_into_a_store_with_a_key(tmp_path: Path) -> None:
    """Into a store with a key the base snapshot is sealed with it like the events (and
    an import without the key is refused before anything is written)."""
    import io

    from statekeeper.cli.transfer import export_agents, import_agents
    from statekeeper.errors import KeyRequired
    from statekeeper.security import Keyring
    from statekeeper.store.keyguard import is_encrypted

    keys = tmp_path / "keys.json"
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    keyring = Keyring.from_file(keys)
    source = f"sqlite:///{tmp_path / 's.db'}"
    want = await _fill(source)
    out = io.BytesIO()
    async with StateStore(source) as store:
        await export_agents(store, ["kept"], out)
    target = f"sqlite:///{tmp_path / 't.db'}"
    async with StateStore(target, keyring=keyring) as store:
        await store.save("other", {"n": 1})  # (an encrypted store)
    with pytest.raises(KeyRequired):
        await import_agents(target, io.BytesIO(out.getvalue()))
    assert await import_agents(target, io.BytesIO(out.getvalue()), key_file=keys) == (1, 3, [])
    async with StateStore(target, keyring=keyring) as store:
        for snap in want["kept"]:
            assert await store.load("kept", at_seq=snap.seq) == snap
        base = await store.backend.latest_snapshot("kept", 9)
        assert base is not None and base.seq == 9 and is_encrypted(base.payload)
        assert (await store.verify(["kept"])).ok
