"""``statekeeper serve``: refuses what is unsafe or not a store before listening; when it
listens, it is on loopback, prints a link with its token, and the token is needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_refuses_a_public_address_without_public(seeded_url: str) -> None:
    r = serve(seeded_url, "--host", "0.0.0.0")
    assert r.returncode != 0
    assert "--public" in r.stderr and "Traceback" not in r.stderr


def test_refuses_what_is_not_a_store_and_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "nothing.db"
    r = serve(f"sqlite:///{target}")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert not target.exists()


def test_refuses_a_short_token(seeded_url: str) -> None:
    r = serve(seeded_url, "--token", "short")
    assert r.returncode != 0 and "at least 16" in r.stderr


def test_refuses_a_malformed_allowed_host(seeded_url: str) -> None:
    r = serve(seeded_url, "--allowed-host", "https://inspector.example:8443")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "allowed host" in r.stderr and "inspector.example" in r.stderr


@pytest.fixture
def running(seeded_url: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STATEKEEPER_INSPECTOR_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.cli", "serve", seeded_url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server says where it is
        yield line, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_prints_a_loopback_link_with_a_fresh_token(
    running: tuple[str, subprocess.Popen[str]],
) -> None:
    line, _ = running
    found = re.search(r"\(read-only\) on (http://127\.0\.0\.1:\d+)/\?token=([\w-]{40,})", line)
    assert found is not None, line
    base, token = found.group(1), found.group(2)
    with httpx.Client(base_url=base, timeout=30) as client:
        first = client.get("/agents")  # the port listens before the link is printed
        assert first.status_code == 401
        login = client.get(f"/agents?token={token}", follow_redirects=False)
        port = base.rsplit(":", 1)[1]
        assert login.status_code == 303
        assert login.headers["set-cookie"].startswith(f"sk_inspector_{port}=")
        page = client.get("/agents", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200 and "agent-000" in page.text
        assert "read-only" in page.text
        # DNS rebinding: another site's name re-bound to 127.0.0.1, with the token
        rebound = client.get(
            "/agents",
            headers={"Authorization": f"Bearer {token}", "Host": f"evil.example:{port}"},
        )
        assert rebound.status_code == 400 and "agent-000" not in rebound.text


def test_without_the_inspector_extra_it_names_the_extra(seeded_url: str) -> None:
    """A plain ``pip install statekeeper`` has no uvicorn: one line naming the extra,
    exit 2, not an internal error."""
    probe = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from statekeeper.cli.app import main\n"
        "main(['serve', sys.argv[1]])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, seeded_url], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "statekeeper[inspector]" in r.stderr and "uvicorn" in r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


READER_POLICY = """\
[principals.reader]
read = ["tenant/**"]
"""


def test_serves_as_the_principal_of_as_and_policy(seeded_url: str, tmp_path: Path) -> None:
    """The global ``--as`` / ``--policy`` reach the inspector: the link says who it
    acts as, the list shows only what that principal may read, the rest is a 403."""
    policy = tmp_path / "policy.toml"
    policy.write_text(READER_POLICY)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STATEKEEPER_INSPECTOR_TOKEN": "t" * 32}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.cli", "--as", "reader", "--policy", str(policy),
         "serve", seeded_url, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server says where it is
        found = re.search(r"\(read-only, as reader\) on (http://127\.0\.0\.1:\d+)/", line)
        assert found is not None, line + (proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        auth = {"Authorization": "Bearer " + "t" * 32}
        with httpx.Client(base_url=found.group(1), timeout=30, headers=auth) as client:
            page = client.get("/agents")
            assert page.status_code == 200
            assert "tenant/alpha" in page.text and "agent-000" not in page.text
            assert client.get("/agent?id=agent-000").status_code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_refuses_a_principal_the_policy_does_not_name(seeded_url: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(READER_POLICY)
    r = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "--as", "mallory", "--policy", str(policy),
         "serve", seeded_url, "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode != 0
    assert "mallory" in r.stderr and "does not name it" in r.stderr
    assert "Traceback" not in r.stderr
