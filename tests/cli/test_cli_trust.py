"""A command line people can trust with their files (issue 10, items 1, 2 and 6).

Every test runs ``statekeeper`` and checks its exit code and output: each command at
least once in a real process, the rest of the runs in this process (``cli_in_process``).

* Nothing is deleted or overwritten unless statekeeper created it and can prove it
  (the SQLite ``application_id`` marker, the demo folder's marker file).
* Commands never create a store (only ``statekeeper init`` does), read commands open
  it read-only, and something that is not a statekeeper store is refused and left
  byte-for-byte as it was — on SQLite, PostgreSQL and Redis.
* Every command that opens a store takes ``--key-file`` and ``$STATEKEEPER_KEY_FILE``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statekeeper.backends.sqlite.files import APPLICATION_ID
from statekeeper.security import Keyring, generate_key

from ..backends._services import POSTGRES_DSN, REDIS_URL, namespace
from ._subprocess import (
    BACKENDS,
    NEED_KEY,
    OWN_STORES,
    STORE_COMMANDS,
    WRITING,
    Run,
    add_langgraph_thread,
    args_for,
    cli,
    cli_env,
    cli_in_process,
    digest,
    one_error_line,
    option_names,
    populate,
    store_commands,
    store_url,
    tree,
)


def not_a_store(line: str) -> bool:
    """The refusal names what is wrong and how to create a store."""
    return "is not a statekeeper store: " in line and "run `statekeeper init" in line


def foreign_db(path: Path) -> Path:
    """Another application's SQLite database (a table of invoices)."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
    conn.executemany(
        "INSERT INTO invoices (customer, total) VALUES (?, ?)",
        [("ACME", 120.5), ("Globex", 99.0)],
    )
    conn.commit()
    conn.close()
    return path


def make_target(kind: str, folder: Path) -> Path:
    """A path that is not a statekeeper store."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "app.db"
    if kind == "foreign":
        foreign_db(path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(b"invoice 1: ACME, 120.50\n" * 40)
    else:
        assert kind == "missing"
    return path


def key_file(folder: Path, key_id: str = "k1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key_id}.json"
    Keyring.write_file(path, {key_id: generate_key()}, key_id)
    return path


# ---------------------------------------------------------------- 10.1 ownership


@pytest.mark.parametrize("kind", ["foreign", "empty", "garbage"])
@pytest.mark.parametrize("keep", [False, True])
def test_demo_refuses_a_file_it_did_not_create(tmp_path: Path, kind: str, keep: bool) -> None:
    folder = tmp_path / "work"
    db = make_target(kind, folder)
    before = tree(folder)
    # one case in a real process; the others through the same entry point in this one
    run = (cli if (kind, keep) == ("foreign", False) else cli_in_process)(
        "demo", "--db", str(db), *(["--keep"] if keep else []), "--json"
    )
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert "statekeeper did not create" in line and str(db) in line
    assert run.stdout == ""
    assert tree(folder) == before  # not deleted, not written, no side files


def test_demo_refuses_a_files_folder_it_did_not_create(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    files = tmp_path / "notes-files"
    files.mkdir()
    (files / "tools.log").write_text("my own log\n")
    (files / "corpus").mkdir()
    (files / "corpus" / "doc-01.txt").write_text("my own notes\n")
    before = tree(tmp_path)
    run = cli_in_process("demo", "--db", str(db))
    assert run.code == 2, str(run)
    assert "the demo did not create that folder" in one_error_line(run)
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_demo_reuses_and_wipes_only_its_own_files(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    first = cli("demo", "--db", str(db), "--kill-after", "4", "--step-delay", "0", "--json")
    assert first.code == 0, str(first)
    assert sqlite3.connect(db).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    again = cli("demo", "--db", str(db), "--kill-after", "4", "--step-delay", "0", "--json")
    assert again.code == 0, str(again)  # its own file: wiped and reused
    assert json.loads(again.stdout)["agent_id"] == "demo-research-1"


def test_a_file_statekeeper_creates_carries_the_marker_one_it_did_not_does_not(
    tmp_path: Path,
) -> None:
    made = tmp_path / "made.db"
    populate(f"sqlite:///{made}")
    app = foreign_db(tmp_path / "app.db")
    conn = sqlite3.connect(made)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()
    assert sqlite3.connect(app).execute("PRAGMA application_id").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("command", "tag"),
    [
        (["witness", "export", "{target}", "--db", "{db}"], "witness file"),
        (["keys", "generate", "--key-file", "{target}"], "key file"),
        (
            ["rekey", "--db", "{db}", "--key-file", "{keys}", "--progress-file", "{target}"],
            "rekey progress file",
        ),
    ],
)
def test_output_files_are_only_written_over_statekeeper_files(
    tmp_path: Path, command: list[str], tag: str
) -> None:
    keys = key_file(tmp_path / "keys")
    populate(f"sqlite:///{tmp_path / 's.db'}")
    target = tmp_path / "notes.json"
    target.write_text('{"my": "notes"}\n')
    before = tree(tmp_path)
    paths = {"target": str(target), "db": str(tmp_path / "s.db"), "keys": str(keys)}
    # refusals in this process (test_cli_bad_arguments runs refusals in real processes)
    run = cli_in_process(*(a.format(**paths) for a in command))
    assert run.code == 2, str(run)
    assert f"refusing to overwrite {target}: it is not a {tag}" in one_error_line(run)
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["keys", "generate", "--key-file", "{out}/keys.json"], "keys.json"),
        (["export", "--db", "{db}", "-o", "{out}/agents.jsonl"], "agents.jsonl"),
        (["witness", "export", "{out}/witness.json", "--db", "{db}"], "witness.json"),
        (
            ["rekey", "--db", "{db}", "--key-file", "{keys}", "--progress-file", "{out}/p.json"],
            "p.json",
        ),
        (
            [
                "backup",
                "--db",
                "{db}",
                "--to",
                "{out}/n.skb",
                "--backup-key",
                "{out}/b.key",
                "--create-backup-key",
            ],
            "n.skb",
        ),
    ],
)
def test_files_beside_an_output_are_never_written_through(
    tmp_path: Path, command: list[str], target: str
) -> None:
    """An output is written to a temporary file beside it, then renamed: a file that is
    there already under a temporary name — a user's, or a symlink to a file elsewhere —
    is neither written (through the link) nor moved; none is left behind."""
    keys = key_file(tmp_path / "keys")
    populate(f"sqlite:///{tmp_path / 's.db'}")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    planted = [f"{target}.tmp", f"{target}.partial", f".{target}.partial"]
    for name in planted:
        (out / name).symlink_to(victim)
    paths = {"out": str(out), "db": str(tmp_path / "s.db"), "keys": str(keys)}
    run = cli_in_process(*(a.format(**paths) for a in command))
    assert run.code == 0, str(run)
    assert victim.read_text() == "someone else's file\n"
    assert all((out / name).is_symlink() for name in planted)
    made = {p.name for p in out.iterdir()} - set(planted)
    assert target in made and not any(".tmp" in n or ".partial" in n for n in made), made


# ------------------------------------------------------- 10.2 read-only, not a store


def test_every_store_command_is_listed() -> None:
    """A new command that opens a store must say how it runs (so the tests below, and
    the bad-argument corpus, cover it)."""
    assert sorted(STORE_COMMANDS) == store_commands()


@pytest.mark.parametrize("kind", ["missing", "empty", "foreign", "garbage"])
def test_not_a_store_is_refused_and_left_unchanged(tmp_path: Path, kind: str) -> None:
    target_dir = tmp_path / "target"
    db = make_target(kind, target_dir)
    aux = tmp_path / "aux"
    keys = key_file(aux)
    witness_store = f"sqlite:///{aux / 'w.db'}"
    populate(witness_store)
    made = cli_in_process("witness", "export", str(aux / "w.json"), "--db", witness_store)
    assert made.code == 0, str(made)
    made = cli_in_process("export", "--output", str(aux / "export.jsonl"), "--db", witness_store)
    assert made.code == 0, str(made)
    before = tree(target_dir)
    todo = [c for c in STORE_COMMANDS if c != "init"]
    runs = [  # refusals: in this process (the real-process refusals: test_cli_bad_arguments)
        cli_in_process(
            *args_for(c, out=str(aux), witness=str(aux / "w.json")),
            "--db",
            str(db),
            *(["--key-file", str(keys)] if c in NEED_KEY else []),
        )
        for c in todo
    ]
    for run in runs:
        assert run.code == 2, str(run)
        assert not_a_store(one_error_line(run)), str(run)
    assert tree(target_dir) == before  # byte for byte, and no file created


def test_init_refuses_what_is_not_its_own_and_creates_a_new_file(tmp_path: Path) -> None:
    for kind in ("empty", "foreign", "garbage"):
        db = make_target(kind, tmp_path / kind)
        before = tree(db.parent)
        run = cli_in_process("init", f"sqlite:///{db}")
        assert run.code == 2, str(run)
        assert "creates a store only in a new file" in one_error_line(run)
        assert tree(db.parent) == before
    new = tmp_path / "new" / "agents.db"
    new.parent.mkdir()
    run = cli("init", f"sqlite:///{new}")  # a real process; the other runs in this one
    assert run.code == 0, str(run)
    assert "created an empty statekeeper store" in run.stdout
    conn = sqlite3.connect(new)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()
    again = cli_in_process("init", f"sqlite:///{new}")
    # joined: the message wraps at 80 columns where the (worker's) path ends
    said = " ".join(again.stdout.split())
    assert again.code == 0 and "already a statekeeper store" in said, str(again)
    listed = cli_in_process("agents", "--db", str(new))
    assert listed.code == 0 and "no agents" in listed.stdout, str(listed)


def test_read_commands_do_not_write_to_a_sqlite_store(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    populate(f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
    conn.close()
    wal = Path(f"{db}-wal")

    def wal_bytes() -> int:
        return wal.stat().st_size if wal.exists() else 0

    main_before = digest(db)
    assert wal_bytes() == 0
    aux = tmp_path / "aux"
    aux.mkdir()
    readers = [c for c in STORE_COMMANDS if c not in WRITING and c != "witness check"]
    # in this process: what a command writes does not depend on the process it runs in
    # (test_every_store_command_on_an_encrypted_store runs each one in a real process)
    for command in readers:  # one at a time: a write would show in the WAL
        run = cli_in_process(*args_for(command, out=str(aux), witness=""), "--db", str(db))
        assert run.code == 0, str(run)
        assert digest(db) == main_before, command
        assert wal_bytes() == 0, f"{command} wrote to the store"
    check = cli_in_process("witness", "check", str(aux / "witness.json"), "--db", str(db))
    assert check.code == 0, str(check)
    assert digest(db) == main_before and wal_bytes() == 0


def _pg(query: str, *params: object) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def test_postgres_mistyped_schema_is_refused_and_not_created(tmp_path: Path) -> None:
    with store_url("postgresql", tmp_path) as url:
        populate(url)
        typo = namespace(tmp_path, "sk_typo_")
        bad = url.replace("schema=", f"schema={typo}&x_schema=")
        bad = f"{POSTGRES_DSN}?schema={typo}"
        # agents in a real process, the others through the same entry point in this one
        runs = [
            (cli if c == "agents" else cli_in_process)(
                *args_for(c, out=str(tmp_path), witness=""), "--db", bad
            )
            for c in ("agents", "stats", "show")
        ]
        for run in runs:
            assert run.code == 2, str(run)
            assert not_a_store(one_error_line(run))
        rows = _pg("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", typo)
        assert rows == [], "a read command created the schema"


@pytest.fixture
def select_only_role(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A populated schema and a LOGIN role with only USAGE + SELECT on it; both dropped
    after. Yields (schema, role)."""
    with store_url("postgresql", tmp_path) as url:
        populate(url)
        schema = namespace(tmp_path)
        role = f"sk_ro_{uuid.uuid4().hex[:12]}"
        _pg(f'CREATE ROLE "{role}" LOGIN')
        try:
            _pg(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
            _pg(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
            yield schema, role
        finally:
            _pg(f'DROP OWNED BY "{role}"')
            _pg(f'DROP ROLE "{role}"')


def test_postgres_read_commands_work_with_a_select_only_role(
    tmp_path: Path, select_only_role: tuple[str, str]
) -> None:
    schema, role = select_only_role
    host = POSTGRES_DSN.split("@", 1)[1]
    url = f"postgresql://{role}@{host}?schema={schema}"
    readers = [c for c in STORE_COMMANDS if c not in WRITING and c != "witness check"]
    # in this process: the role's rights, not the process, decide (the denied write
    # below, and test_every_store_command_on_an_encrypted_store, run real processes)
    runs = [
        cli_in_process(*args_for(c, out=str(tmp_path), witness=""), "--db", url) for c in readers
    ]
    for run in runs:
        assert run.code == 0, str(run)
    shown = {r.args[0]: r for r in runs}
    assert "alpha" in shown["agents"].stdout and "gamma" in shown["agents"].stdout
    check = cli_in_process("witness", "check", str(tmp_path / "witness.json"), "--db", url)
    assert check.code == 0, str(check)
    # the role really cannot write: a writing command fails cleanly
    denied = cli("delete", "beta", "--yes", "--db", url)
    # the role's refusal is AccessDenied (exit 4), naming the role, no SQL text
    assert denied.code == 4, str(denied)
    assert "database role" in denied.stderr and "CONTEXT" not in denied.stderr
    one_error_line(denied)


def test_redis_mistyped_prefix_is_refused_and_nothing_written(tmp_path: Path) -> None:
    import redis

    typo = namespace(tmp_path, "sk_typo_") + ":"
    bad = f"{REDIS_URL}?prefix={typo}"
    # agents in a real process, the others through the same entry point in this one
    runs = [
        (cli if c == "agents" else cli_in_process)(
            *args_for(c, out=str(tmp_path), witness=""), "--db", bad
        )
        for c in ("agents", "stats", "history")
    ]
    for run in runs:
        assert run.code == 2, str(run)
        assert not_a_store(one_error_line(run))
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert list(client.scan_iter(match=typo + "*")) == []
    finally:
        client.close()


def test_redis_read_commands_do_not_write(tmp_path: Path) -> None:
    """Reads through a URL with ``ttl`` would refresh TTLs, and listing would tidy
    stale index entries: both are writes, and read commands make neither."""
    import redis

    with store_url("redis", tmp_path) as url:
        populate(url)
        prefix = namespace(tmp_path) + ":"
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.zadd(prefix + "agents", {"stale-entry": 0})  # an index entry with no agent
            ttl_url = url + "&ttl=3600"
            readers = [c for c in STORE_COMMANDS if c not in WRITING and c != "witness check"]
            for command in readers:  # in this process, as for SQLite above
                args = args_for(command, out=str(tmp_path), witness="")
                run = cli_in_process(*args, "--db", ttl_url)
                assert run.code == 0, str(run)
            for agent in ("alpha", "beta", "gamma"):
                assert client.pttl(f"{prefix}a:{agent}") == -1, f"a read set a TTL on {agent}"
            assert client.zscore(prefix + "agents", "stale-entry") == 0
        finally:
            client.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_init_then_read_on_every_backend(tmp_path: Path, backend: str) -> None:
    with store_url(backend, tmp_path) as url:
        # init in a real process on every engine; the reads around it in this process
        before = cli_in_process("agents", "--db", url)
        assert before.code == 2 and not_a_store(one_error_line(before)), str(before)
        made = cli("init", url)
        assert made.code == 0 and "created an empty statekeeper store" in made.stdout, str(made)
        listed = cli_in_process("agents", "--db", url)
        assert listed.code == 0 and "no agents" in listed.stdout, str(listed)
        again = cli_in_process("init", url, "--json")
        assert again.code == 0 and json.loads(again.stdout)["created"] is False, str(again)


# ------------------------------------------------------------------ 10.6 keys


def test_every_store_command_takes_key_file() -> None:
    for command in store_commands():
        assert "--key-file" in option_names(command), f"{command} has no --key-file"
    assert OWN_STORES.isdisjoint(store_commands())


# One per family: reads, keys, witness, the integration, export/import (delete and
# rekey below run in a real process too).
REAL_PROCESS = frozenset({"agents", "keys status", "witness export", "langgraph prune", "export"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_store_command_on_an_encrypted_store(tmp_path: Path, backend: str) -> None:
    """Each command opens an encrypted store with --key-file, and with
    $STATEKEEPER_KEY_FILE; without a key it fails with one line (exit 2), but for
    ``agents`` and ``stats``, which list what is stored in the clear."""
    keys = key_file(tmp_path / "keys")
    with store_url(backend, tmp_path) as url:
        populate(url, keyring=Keyring.from_file(keys))
        add_langgraph_thread(url, Keyring.from_file(keys))  # prune must decrypt it
        out = tmp_path / "out"
        out.mkdir()
        witness = out / "witness.json"
        order = ["witness export", "witness check"] + [
            c
            for c in STORE_COMMANDS
            # forget needs a key vault: tests/governance/test_cli_governance.py
            if c not in ("witness export", "witness check", "delete", "rekey", "init", "forget")
        ]
        # one command per family in a real process, on SQLite (as a user runs it); the
        # rest, and the server engines, through the same entry point in this process:
        # --key-file is read by the shared option code, not per command (no KDF either:
        # the keyring's subkeys are HKDF), so each further process only measured its own
        # interpreter start (~1.5 CPU-s each, 47.8 CPU-s for this case at load 20)
        for command in order:
            args = args_for(command, out=str(out), witness=str(witness))
            real = backend == "sqlite" and command in REAL_PROCESS
            run: Callable[..., Run] = cli if real else cli_in_process
            with_flag = run(*args, "--db", url, "--key-file", str(keys))
            assert with_flag.code == 0, str(with_flag)
            # the same run, the key from the environment: in this process (one real
            # process per command above is the proof it runs as a user runs it)
            key_env = cli_env(STATEKEEPER_KEY_FILE=str(keys))
            with_env = cli_in_process(*args, "--db", url, env=key_env)
            assert with_env.code == 0, str(with_env)
        for command in ("show", "history", "witness export", "langgraph prune"):
            args = args_for(command, out=str(out), witness=str(witness))
            without = cli_in_process(*args, "--db", url)
            assert without.code == 2, str(without)
            one_error_line(without)
        # ids and times are stored in the clear: listed, each state "(encrypted)"
        for command in ("agents", "stats"):
            args = args_for(command, out=str(out), witness=str(witness))
            without = cli_in_process(*args, "--db", url)
            assert without.code == 0 and "(encrypted)" in without.stdout, str(without)
        # delete and rekey in a real process on SQLite, in this one on the servers
        run = cli if backend == "sqlite" else cli_in_process
        deleted = run("delete", "beta", "--yes", "--db", url, "--key-file", str(keys))
        assert deleted.code == 0, str(deleted)
        rekeyed = run(
            "rekey",
            "--db",
            url,
            "--progress-file",
            str(out / "rk.json"),
            env=cli_env(STATEKEEPER_KEY_FILE=str(keys)),
        )
        assert rekeyed.code == 0, str(rekeyed)


def test_read_commands_open_a_tiered_store_read_only(tmp_path: Path) -> None:
    """``agents`` and ``show`` on a tiered store (SQLite durable, SQLite cold, a
    process-local hot tier): answered from the durable tier, and from the cold tier for
    a demoted agent, without rehydrating, demoting or writing anything."""
    import asyncio

    from statekeeper.backends import open_backend, tiered_url
    from statekeeper.backends.tiered import TieredBackend

    folder = tmp_path / "store"
    folder.mkdir()
    tiers = {
        "hot": "memory://",
        "durable": f"sqlite:///{folder / 'durable.db'}",
        "cold": f"sqlite:///{folder / 'cold.db'}",
    }
    # written (and beta demoted) with no background demoter, so only beta is cold ...
    writer_url = tiered_url(**tiers, idle_after=3600)
    # ... and read with one that a writer would run at once on every agent
    url = tiered_url(**tiers, idle_after=0.001, demote_interval=0.001)
    populate(writer_url)

    async def demote_beta() -> None:
        backend = open_backend(writer_url)
        assert isinstance(backend, TieredBackend)
        try:
            assert await backend.demote("beta")
        finally:
            await backend.close()

    asyncio.run(demote_beta())
    for name in ("durable.db", "cold.db"):  # every page in the main files, no WAL left
        conn = sqlite3.connect(folder / name)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    files = [folder / "durable.db", folder / "cold.db"]
    before = [digest(f) for f in files]

    def wal_bytes() -> int:
        wals = [Path(f"{f}-wal") for f in files]
        return sum(w.stat().st_size for w in wals if w.exists())

    listed = cli("agents", "--db", url)
    assert listed.code == 0, str(listed)
    assert all(name in listed.stdout for name in ("alpha", "beta", "gamma")), str(listed)
    for agent, text in (("alpha", "research"), ("beta", '"n": 2')):
        shown = cli_in_process("show", agent, "--db", url)  # agents above: a real process
        assert shown.code == 0, str(shown)
        assert text in shown.stdout, str(shown)
    # the main files byte-for-byte as they were, and nothing written to a WAL (a
    # read-only SQLite connection may leave an empty -wal and a -shm beside them)
    assert [digest(f) for f in files] == before
    assert wal_bytes() == 0
    names = sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert names == ["cold.db", "durable.db"]
