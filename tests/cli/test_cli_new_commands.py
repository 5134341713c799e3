"""``diff``, ``export``/``import`` and ``tail`` on SQLite, PostgreSQL and Redis stores.

Each command family runs as a real process (``sk``) at least once: ``diff`` on a colour
terminal, ``export``/``import`` with the key file from the environment and through a
pipe on SQLite, ``tail -f`` on every engine. The other cases run the console script's
own entry point in this process (``sk_in_process``): a fresh interpreter costs about
half a CPU-second, minutes over the suite on a loaded machine."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from statekeeper import SyncStateStore

from ._export_digest import digest_of
from ._proc import (
    ENGINES,
    assert_fits,
    cli_env,
    empty_url,
    engine_url,
    populate,
    sk,
    sk_in_process,
)

__all__ = ["empty_url", "engine_url"]  # fixtures used by parametrized tests

engines = pytest.mark.parametrize("empty_url", ENGINES, indirect=True)


def history_json(url: str, agent: str) -> list[dict[str, object]]:
    result = sk("history", agent, "--db", url, "--json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


# ---------------------------------------------------------------------------- diff


@engines
def test_diff_last_change_of_an_agent(engine_url: str) -> None:
    result = sk_in_process("diff", "alpha", "--db", engine_url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "--- alpha@3" in out and "+++ alpha@4" in out
    assert '-  "state": "tool_call"' in out
    assert '+  "state": "processing"' in out
    assert '+    "results": {' in out
    assert_fits(out)


@engines
def test_diff_between_seqs_json(engine_url: str) -> None:
    result = sk_in_process(
        "diff", "alpha", "--from", "1", "--to", "4", "--db", engine_url, "--json"
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["from"]["seq"] == 1 and doc["from"]["state"] == "idle"
    assert doc["to"]["seq"] == 4 and doc["to"]["state"] == "processing"
    assert doc["same"] is False
    assert {"op": "add", "path": "/data/results", "value": {"c1": {"hits": 3}}} in doc["ops"]


@engines
def test_diff_two_agents_and_exit_code(engine_url: str) -> None:
    result = sk_in_process("diff", "alpha", "gamma", "--db", engine_url, "--exit-code")
    assert result.returncode == 1, result.stderr
    assert "--- alpha@4" in result.stdout and "+++ gamma@3" in result.stdout
    assert '+  "state": "completed"' in result.stdout
    same = sk_in_process("diff", "alpha", "alpha", "--db", engine_url, "--exit-code")
    assert same.returncode == 0
    assert "no difference" in same.stdout


def test_diff_is_coloured_on_a_colour_terminal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    populate(url)
    env = {"NO_COLOR": "", "FORCE_COLOR": "1", "TERM": "xterm-256color"}
    result = sk("diff", "alpha", "--db", url, **env)
    assert result.returncode == 0, result.stderr
    assert "\x1b[31m" in result.stdout  # red removal
    assert "\x1b[32m" in result.stdout  # green addition


def test_diff_of_the_first_event_shows_the_creation(tmp_path: Path) -> None:
    """``--to 1`` (and ``diff AGENT`` of a one-event agent) compares with the state
    before the agent existed, not seq 1 with itself ("no difference: x@1 = x@1")."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    populate(url)
    store = SyncStateStore(url)
    try:
        store.save("solo", {"n": 1})
    finally:
        store.close()
    for args in (["alpha", "--to", "1"], ["solo"]):
        result = sk_in_process("diff", *args, "--db", url, "--exit-code")
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert "no difference" not in result.stdout
        assert f"--- {args[0]}@0 (did not exist)" in result.stdout
        assert f"+++ {args[0]}@1" in result.stdout
    assert (
        '+    "task": "research"' in sk_in_process("diff", "alpha", "--to", "1", "--db", url).stdout
    )
    doc = json.loads(sk_in_process("diff", "solo", "--db", url, "--json").stdout)
    assert doc["from"] == {"agent_id": "solo", "seq": 0, "state": None, "data": None}
    assert doc["to"]["seq"] == 1 and doc["to"]["data"] == {"n": 1}
    assert doc["same"] is False
    assert doc["ops"] == [
        {"op": "add", "path": "", "value": {"state": doc["to"]["state"], "data": {"n": 1}}}
    ]
    # --to alone: --from defaults to the seq before it
    two = json.loads(sk_in_process("diff", "alpha", "--to", "3", "--db", url, "--json").stdout)
    assert (two["from"]["seq"], two["to"]["seq"]) == (2, 3)


def test_diff_help_says_the_real_defaults() -> None:
    out = " ".join(sk_in_process("diff", "--help").stdout.split())
    assert "head-1" not in out
    assert "--to minus 1" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["ghost"], 1, "agent 'ghost' not found"),
        (["alpha", "--from", "9"], 2, "seq 9 is outside 1..4"),
        (["alpha", "ghost"], 1, "agent 'ghost' not found"),
        (["alpha", "--from", "0"], 2, "--from"),
    ],
)
def test_diff_bad_arguments(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    populate(url)
    result = sk_in_process("diff", *args, "--db", url)
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------ export / import


@pytest.mark.slow  # every engine into every engine: ~40 CLI processes per engine
@pytest.mark.timeout(1200)  # ~31 fresh CLI processes: past 300 s twice at load ~17 on 2 cores
@engines
def test_export_import_round_trips_to_every_engine(
    engine_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Export from this engine, import into SQLite, PostgreSQL and Redis: the histories
    read back identical (seqs, types, timestamps, data) and verify clean."""
    from ..backends._services import (
        POSTGRES_DSN,
        REDIS_URL,
        delete_prefix,
        drop_schema,
        namespace,
        postgres_reachable,
        redis_reachable,
    )

    file = tmp_path / "agents.jsonl"
    exported = sk("export", "--db", engine_url, "-o", str(file))
    assert exported.returncode == 0, exported.stderr
    assert "exported 3 agent(s), 9 event(s)" in exported.stdout
    targets = {"sqlite": f"sqlite:///{tmp_path / 'copy.db'}"}
    ns = namespace(tmp_path, "sk_imp_")
    if postgres_reachable():
        targets["postgresql"] = f"{POSTGRES_DSN}?schema={ns}"
    if redis_reachable():
        targets["redis"] = f"{REDIS_URL}?prefix={ns}:"
    try:
        for name, target in targets.items():
            assert sk("init", target).returncode == 0  # import never creates a store
            imported = sk("import", str(file), "--db", target)
            assert imported.returncode == 0, (name, imported.stderr)
            assert "imported 3 agent(s), 9 event(s); verified" in imported.stdout
            for agent in ("alpha", "beta", "gamma"):
                assert history_json(target, agent) == history_json(engine_url, agent), name
            assert sk("verify", "--db", target).returncode == 0
    finally:
        if "postgresql" in targets:
            drop_schema(ns)
        if "redis" in targets:
            delete_prefix(ns + ":")


@engines
def test_export_to_stdout_and_import_from_stdin(engine_url: str, tmp_path: Path) -> None:
    # a real pipe between two processes on SQLite; the other engines in this process
    run = sk if engine_url.startswith("sqlite") else sk_in_process
    exported = run("export", "alpha", "--db", engine_url)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines[0]["format"] == "statekeeper-export"
    assert [line["seq"] for line in lines[1:-2]] == [1, 2, 3, 4]
    assert lines[-2]["end"] == "alpha" and lines[-2]["state"] == "processing"
    assert lines[-1] == {
        "complete": {"agents": 1, "events": 4, "sha256": digest_of(exported.stdout)}
    }
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    assert sk_in_process("init", target).returncode == 0  # import never creates a store
    imported = run("import", "-", "--db", target, "--json", input=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {
        "agents": 1,
        "events": 4,
        "skipped": [],
        "forgotten": [],
        "holds_placed": [],
        "verified": True,
    }


def test_export_keeps_typed_values_and_encryption_is_per_store(tmp_path: Path) -> None:
    """A datetime survives the trip, and a store with a key imports into one without."""
    keys = tmp_path / "keys.json"
    assert sk_in_process("keys", "generate", "--key-file", str(keys)).returncode == 0
    source = f"sqlite:///{tmp_path / 'enc.db'}"
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    from statekeeper.security import Keyring

    store = SyncStateStore(source, keyring=Keyring.from_file(keys))
    store.save("typed", {"when": when, "tags": {"a", "b"}})
    store.close()
    file = tmp_path / "typed.jsonl"
    env = {"STATEKEEPER_KEY_FILE": str(keys)}
    assert sk("export", "--db", source, "-o", str(file), **env).returncode == 0
    target = f"sqlite:///{tmp_path / 'plain.db'}"
    assert sk_in_process("init", target).returncode == 0  # import never creates a store
    imported = sk("import", str(file), "--db", target)
    assert imported.returncode == 0, imported.stderr
    back = SyncStateStore(target)
    try:
        assert back.load("typed").data == {"when": when, "tags": {"a", "b"}}
    finally:
        back.close()


# The import refusals below run in this process (``sk_in_process``): a fresh
# interpreter per run costs seconds on a loaded machine. export and import run as real
# processes in the tests above (stdin, the key file from the environment).


@engines
def test_import_refuses_an_existing_agent_and_writes_nothing(
    engine_url: str, tmp_path: Path
) -> None:
    file = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", engine_url, "-o", str(file)).returncode == 0
    before = sk_in_process("agents", "--db", engine_url, "--json").stdout
    again = sk_in_process("import", str(file), "--db", engine_url)
    assert again.returncode == 2
    assert "agent 'alpha' already exists in the target store; nothing was imported" in (
        again.stderr
    )
    assert sk_in_process("agents", "--db", engine_url, "--json").stdout == before
    skipped = sk_in_process("import", str(file), "--db", engine_url, "--skip-existing", "--json")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["skipped"] == ["alpha", "beta", "gamma"]


def test_import_again_completes_an_agent_an_interrupted_import_left_half_written(
    tmp_path: Path,
) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    populate(source)
    file = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", source, "-o", str(file)).returncode == 0
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    # what an import stopped (Ctrl-C) after alpha's second event left in the target
    head = [x for x in lines[:-1] if x.get("agent_id", x.get("end")) in (None, "alpha")]
    kept = [x for x in head if "end" not in x and ("seq" not in x or x["seq"] <= 2)]
    kept.append({**head[-1], "seq": 2, "state": kept[-1]["fsm"]})
    kept.append({"complete": {"agents": 1, "events": 2}})
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(json.dumps(x) + "\n" for x in kept))
    target = f"sqlite:///{tmp_path / 't.db'}"
    assert sk_in_process("init", target).returncode == 0
    assert sk_in_process("import", str(partial), "--db", target).returncode == 0
    # run again: alpha is completed (not skipped as if it were whole), the rest imported
    again = sk_in_process("import", str(file), "--db", target, "--skip-existing", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["skipped"] == []
    assert history_json(target, "alpha") == history_json(source, "alpha")
    exported = sk_in_process("export", "--db", target).stdout.splitlines()
    assert exported[1:] == file.read_text().splitlines()[1:]  # (after the header)
    # an agent that is whole, or not the file's, is still refused (or skipped)
    refused = sk_in_process("import", str(file), "--db", target)
    assert refused.returncode == 2
    assert "agent 'alpha' already exists" in refused.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty, not a statekeeper export"),
        ("\n\n", "empty, not a statekeeper export (no header line)"),
        ("garbage\n", "line 1: not a JSON object"),
        ('{"format": "other"}\n', "line 1: not a statekeeper export"),
        ("TRUNCATE", "has no end line"),
        ("CUT", "without its completion line: a truncated export"),
        (
            "MISCOUNT",
            "the completion line counts 3 agent(s) and 9 event(s), the file holds 2 and 6",
        ),
        ("AFTER", "a line after the completion line"),
        ("GAP", "seq 3 (expected 2)"),
    ],
)
def test_import_checks_the_whole_file_before_writing(
    tmp_path: Path, content: str, message: str
) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    populate(source)
    good = sk_in_process("export", "--db", source).stdout.splitlines()
    end_lines = [i for i, line in enumerate(good) if '"end"' in line]
    if content == "TRUNCATE":
        content = "\n".join(good[:-2]) + "\n"  # gamma's end line is missing
    elif content == "CUT":  # cut at an agent's end: every agent in it whole, some missing
        content = "\n".join(good[: end_lines[-2] + 1]) + "\n"
    elif content == "MISCOUNT":  # a whole agent's lines taken out, the counts kept
        content = "\n".join(good[: end_lines[-2] + 1] + good[-1:]) + "\n"
    elif content == "AFTER":
        content = "\n".join([*good, good[1]]) + "\n"
    elif content == "GAP":
        content = "\n".join(good[:2] + good[3:]) + "\n"
    file = tmp_path / "bad.jsonl"
    file.write_text(content)
    target = tmp_path / "target.db"
    # import never creates a store
    assert sk_in_process("init", f"sqlite:///{target}").returncode == 0
    result = sk_in_process("import", str(file), "--db", f"sqlite:///{target}")
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    listed = sk_in_process("agents", "--db", f"sqlite:///{target}", "--json")
    assert json.loads(listed.stdout)["agents"] == []


def test_import_reads_a_version_1_file_written_before_the_completion_line(
    tmp_path: Path,
) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    populate(source)
    lines = [
        json.loads(line) for line in sk_in_process("export", "--db", source).stdout.splitlines()
    ]
    assert lines[0]["version"] == 3 and "complete" in lines[-1]
    old = [{**lines[0], "version": 1}, *lines[1:-1]]  # as version 1 wrote it
    file = tmp_path / "v1.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in old))
    target = f"sqlite:///{tmp_path / 'target.db'}"
    assert sk_in_process("init", target).returncode == 0
    imported = sk_in_process("import", str(file), "--db", target, "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["agents"] == 3
    with_trailer = tmp_path / "v1-trailer.jsonl"  # a completion line is no v1 line
    with_trailer.write_text("".join(json.dumps(line) + "\n" for line in [*old, lines[-1]]))
    refused = sk_in_process("import", str(with_trailer), "--db", target, "--skip-existing")
    assert refused.returncode == 2, refused.stderr


def test_import_missing_file_and_export_into_a_missing_folder(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    populate(source)
    missing = sk_in_process("import", str(tmp_path / "nope.jsonl"), "--db", source)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    folder = sk_in_process(
        "export", "--db", source, "-o", str(tmp_path / "no" / "such" / "x.jsonl")
    )
    assert folder.returncode == 2 and "no such folder" in folder.stderr
    assert not (tmp_path / "no").exists()


# ---------------------------------------------------------------------------- tail


@engines
def test_tail_last_events(engine_url: str) -> None:
    result = sk_in_process("tail", "--db", engine_url, "-n", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4  # the newest 4 across agents, oldest first
    assert "beta  #2  patch" in lines[0]
    assert "gamma  #1  created  → idle" in lines[1]
    assert "gamma  #3  complete  processing → completed" in lines[3]
    one = sk_in_process("tail", "alpha", "--db", engine_url, "-n", "1", "--json")
    assert [json.loads(x)["seq"] for x in one.stdout.splitlines()] == [4]
    assert sk_in_process("tail", "ghost", "--db", engine_url).returncode == 1


def _read_lines(proc: subprocess.Popen[str], n: int) -> list[str]:
    assert proc.stdout is not None
    lines = []  # type: ignore[var-annotated]
    while len(lines) < n:
        line = proc.stdout.readline()
        assert line, "tail -f ended before printing the expected lines"
        lines.append(line.rstrip("\n"))
    return lines


@engines
@pytest.mark.parametrize("agent", [None, "beta"])
def test_tail_follow_prints_new_events(engine_url: str, agent: str | None) -> None:
    """``tail -f`` prints the newest event, then each new one as it is committed."""
    args = [sys.executable, "-m", "statekeeper.cli", "tail", "-f", "-n", "1"]
    args += [*([agent] if agent else []), "--db", engine_url, "--interval", "0.05"]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
    )
    try:
        first = _read_lines(proc, 1)
        assert ("gamma  #3  complete" if agent is None else "#2  patch") in first[0]
        store = SyncStateStore(engine_url)
        try:
            store.save("beta", {"n": 3})
            if agent is None:
                store.save("delta", {"new": True})
        finally:
            store.close()
        expected = 2 if agent is None else 1
        new = _read_lines(proc, expected)
        assert any("#3  patch" in line for line in new), new
        if agent is None:
            assert any("delta  #1  created" in line for line in new), new
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            assert "Traceback" not in proc.stderr.read()
            proc.stderr.close()


def test_import_skip_existing_names_a_few_skipped_agents_and_json_all(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(source) as store:
        for i in range(12):
            store.save(f"agent-{i:02d}", {"i": i})
    file = tmp_path / "agents.jsonl"
    assert sk_in_process("export", "--db", source, "-o", str(file)).returncode == 0
    text = sk_in_process("import", str(file), "--db", source, "--skip-existing")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())  # (the console wraps long lines)
    assert (
        "skipped 12 existing agent(s): agent-00, agent-01, agent-02, agent-03, agent-04"
        " and 7 more (--json lists them all)"
    ) in flat
    assert "agent-05" not in text.stdout
    listed = sk_in_process("import", str(file), "--db", source, "--skip-existing", "--json")
    assert json.loads(listed.stdout)["skipped"] == [f"agent-{i:02d}" for i in range(12)]
