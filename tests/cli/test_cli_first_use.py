"""What a new user meets first: an S3 bucket without credentials, a half-typed URL, a
broken line in an import file, and the commands the CLI tells them to run."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from statekeeper import SyncStateStore

from ._proc import cli_env, populate, sk, sk_in_process

SECRET = "wJalrXUtnFEMI-not-a-real-secret-K7MDENG"


def _without_aws(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment where the AWS credential chain finds nothing (no instance role)."""
    env = {k: v for k, v in cli_env().items() if not k.startswith("AWS_")}
    missing = str(tmp_path / "no-such-aws-file")
    env.update(
        AWS_CONFIG_FILE=missing,
        AWS_SHARED_CREDENTIALS_FILE=missing,
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return env


class _Refuses(BaseHTTPRequestHandler):
    """An S3 endpoint that refuses every request's credentials (a HEAD gets a bare 403)."""

    def _refuse(self) -> None:
        body = b"" if self.command == "HEAD" else b"<Error><Code>InvalidAccessKeyId</Code></Error>"
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET = do_PUT = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _sk_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``statekeeper ARGS`` in a subprocess with exactly ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _s3_error(run: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a run against ``s3://sk-ux-bucket/agents``."""
    assert run.returncode == 2, run
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    line: str = lines[0]
    assert "_is_store" not in line and "_prepare" not in line  # no internal function names
    assert "s3://sk-ux-bucket/agents" in line  # which URL
    assert "bucket 'sk-ux-bucket'" in line  # what needs credentials
    assert "AWS_ACCESS_KEY_ID" in line  # what to do
    return line


def test_s3_without_credentials_says_what_to_give(tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    # nothing listens on port 9: no request is ever sent without credentials to sign it
    url = "s3://sk-ux-bucket/agents?endpoint_url=http://127.0.0.1:9"
    run = _sk_env(_without_aws(tmp_path), "history", "a1", "--db", url)
    assert "credentials not found" in _s3_error(run)


def test_s3_refusing_credentials_says_so_without_the_secret(
    tmp_path: Path, refusing_endpoint: str
) -> None:
    pytest.importorskip("boto3")
    url = f"s3://sk-ux-bucket/agents?endpoint_url={refusing_endpoint}"
    env = _without_aws(tmp_path, AWS_ACCESS_KEY_ID="AKIAUXTESTFAKE", AWS_SECRET_ACCESS_KEY=SECRET)
    run = _sk_env(env, "agents", "--db", url)
    line = _s3_error(run)
    assert "credentials refused" in line
    assert SECRET not in run.stderr + run.stdout


@pytest.mark.parametrize(
    ("value", "spelling"),
    [
        ("sqlite:/x.db", "sqlite:///relative.db or sqlite:////absolute/path.db"),
        ("sqlite:x.db", "sqlite:///relative.db or sqlite:////absolute/path.db"),
        ("SQLite+pysqlite:/x.db", "sqlite:///relative.db"),
        ("redis:localhost", "redis://host:6379/0"),
        ("postgresql:/db", "postgresql://user@host:5432/db"),
        ("s3:bucket", "s3://bucket/prefix"),
    ],
)
@pytest.mark.parametrize("command", ["history", "init"])
def test_a_url_missing_its_slashes_is_refused_not_taken_as_a_file(
    tmp_path: Path, value: str, spelling: str, command: str
) -> None:
    args = [command, value] if command == "init" else [command, "a1", "--db", value]
    run = sk_in_process(*args, cwd=tmp_path)
    assert run.returncode == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: malformed "), lines
    assert spelling in lines[0]
    assert "sqlite:///sqlite" not in lines[0]  # never read as a file named "sqlite:..."
    assert list(tmp_path.iterdir()) == []  # and no such file made


def test_a_bare_path_still_opens_a_sqlite_file(tmp_path: Path) -> None:
    assert sk_in_process("init", "store.db", cwd=tmp_path).returncode == 0
    assert (tmp_path / "store.db").is_file()


@pytest.mark.parametrize(
    ("broken", "what"),
    [
        ('{"agent_id": "alpha", ', "the line ends before the object does"),
        ('{"a": 1,}', "trailing comma is not allowed at column 8"),
        ("nope", "invalid literal, expected 'null' at column 1"),
        ('{"a": 1}{', "unexpected content after document at column 9"),
    ],
)
def test_a_broken_import_line_is_named_once_by_the_file_and_its_line(
    tmp_path: Path, broken: str, what: str
) -> None:
    source, target = f"sqlite:///{tmp_path / 's.db'}", f"sqlite:///{tmp_path / 't.db'}"
    populate(source)
    assert sk_in_process("init", target).returncode == 0
    lines = sk_in_process("export", "--db", source).stdout.splitlines()
    lines[1] = broken
    file = tmp_path / "broken.jsonl"
    file.write_text("\n".join(lines) + "\n")
    run = sk_in_process("import", str(file), "--db", target)
    assert run.returncode == 2
    errors = run.stderr.splitlines()
    assert errors == [f"error: {file}, line 2: not a JSON object: {what}"], errors
    with SyncStateStore(target) as store:
        assert store.list_agents() == []


def _told(stdout: str, label: str) -> list[str]:
    """The command after ``label:`` on its line, as a shell splits it."""
    lines = [line for line in stdout.splitlines() if line.startswith(f"{label}: statekeeper ")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0].removeprefix(f"{label}: "))


@pytest.mark.slow
def test_the_demo_command_to_run_next_is_one_line_at_80_columns(tmp_path: Path) -> None:
    db = tmp_path / "a folder with a long name so the path passes eighty columns" / "demo.db"
    run = sk("demo", "--db", str(db), "--kill-after", "4", "--step-delay", "0.01", columns=80)
    assert run.returncode == 0, run.stderr
    command = _told(run.stdout, "inspect it")
    assert command == ["statekeeper", "history", "demo-research-1", "--db", str(db)]


def test_the_next_page_command_is_one_line_at_80_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    long_id = "an-agent-with-an-id-long-enough-that-the-next-page-line-passes-eighty-columns"
    with SyncStateStore(url) as store:
        for agent_id in (long_id, long_id + "-2"):
            store.create(agent_id, {"n": 1})
    run = sk_in_process("agents", "--limit", "1", "--db", url, columns=80)
    assert run.returncode == 0, run.stderr
    told = ["statekeeper", "agents", "--db", url, "--limit", "1", "--after", long_id]
    assert _told(run.stdout, "more") == told
