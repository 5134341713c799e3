"""The inspector opened as a principal (``statekeeper serve --as P --policy FILE``): lists
show only what P may read, everything else answers 403 (audited), writes need write."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Policy, parse_policy
from tests.keyfiles import write_key_file

from .conftest import TOKEN, in_thread, make_client

POLICY_TEXT = """\
[roles.acme-support]
read = ["acme/**"]
write = ["acme/support/**"]

[principals.alice]
roles = ["acme-support"]

[principals.ops]
admin = ["**"]
"""

ACME = ["acme/billing/inv-7", "acme/support/t-1", "acme/support/t-2"]
GLOBEX = ["globex/jobs/j-1", "globex/jobs/j-2", "globex/zz"]
SECRET = "globex-secret-payroll"


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[str, Path]:
    """A keyed SQLite store with two tenants, and its key file."""
    from statekeeper import StateStore

    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    url = f"sqlite:///{tmp_path / 'tenants.db'}"

    async def build() -> None:
        async with StateStore(url, keyring=Keyring.from_file(keys)) as store:
            for agent_id in GLOBEX + ACME:  # globex written last: first by last write
                await store.save(agent_id, {"owner": agent_id, "note": SECRET})
                await store.save(agent_id, {"owner": agent_id, "n": 2})

    in_thread(build)
    return url, keys


@pytest.fixture
def policy() -> Policy:
    return parse_policy(POLICY_TEXT)


def as_client(keyed: tuple[str, Path], policy: Policy, principal: str, **options: Any) -> Any:
    url, keys = keyed
    return make_client(url, key_file=keys, principal=principal, policy=policy, **options)


@pytest.fixture
def alice(keyed: tuple[str, Path], policy: Policy) -> Iterator[Any]:
    with as_client(keyed, policy, "alice") as c:
        yield c


def ids_on(html: str) -> list[str]:
    return [
        unescape(m)
        for m in re.findall(r'<td class="id"><a href="/agent\?id=[^"]*">(.*?)</a></td>', html)
    ]


def denied_in_audit(keyed: tuple[str, Path]) -> list[tuple[str | None, str, str | None]]:
    """``(principal, operation, agent)`` of every denied entry of the audit log."""
    from statekeeper import StateStore
    from statekeeper.governance import AuditLog

    url, keys = keyed

    async def read() -> list[tuple[str | None, str, str | None]]:
        keyring = Keyring.from_file(keys)
        async with StateStore(url, keyring=keyring) as store:
            log = AuditLog(store.backend, keyring)
            assert (await log.verify()).ok
            return [
                (e.principal, e.operation, e.agent_id)
                async for e in log.entries()
                if e.outcome == "denied"
            ]

    result: list[tuple[str | None, str, str | None]] = in_thread(read)
    return result


@pytest.mark.parametrize("sort", ["", "desc", "recent", "idle"])
def test_every_list_order_shows_only_readable_agents(alice: Any, sort: str) -> None:
    """Ascending goes through the governed store; descending and the last-write sorts
    read the backend's indexes directly and must filter the same way, page by page,
    never handing out an unreadable id as a cursor."""
    seen: list[str] = []
    params: dict[str, str] = {"limit": "1", **({"sort": sort} if sort else {})}
    for _ in range(10):
        r = alice.get("/agents?" + urlencode(params))
        assert r.status_code == 200, r.text
        assert "globex" not in r.text
        seen.extend(ids_on(r.text))
        found = re.search(r'href="/agents\?([^"]*after=[^"]*)"[^>]*>Next', r.text)
        if found is None:
            break
        params = dict(parse_qsl(unescape(found.group(1))))
        assert not params["after"].startswith("globex"), params  # never a cursor
    assert sorted(seen) == ACME, (sort, seen)


def test_counts_threads_and_analysis_cover_readable_agents_only(alice: Any) -> None:
    assert "3 agents" in alice.get("/store/count").text
    assert "as alice" in alice.get("/agents").text
    analysis = alice.get("/store/analysis")
    assert analysis.status_code == 200 and "globex" not in analysis.text
    store = alice.get("/store")
    assert 'id="health-detail"' not in store.text  # store-wide detail: admins only
    assert "needs admin" in store.text


def test_an_unreadable_agent_is_a_clear_403_and_audited(
    alice: Any, keyed: tuple[str, Path]
) -> None:
    assert alice.get("/agent?id=acme/billing/inv-7").status_code == 200
    for path in (
        "/agent",
        "/agent/state",
        "/agent/events",
        "/agent/event?seq=1&",
        "/agent/diff?a=1&b=2&",
        "/agent/keys",
        "/agent/verify",
        "/agent/live",
    ):
        sep = "&" if "?" in path else "?"
        r = alice.get(f"{path}{sep}id=globex/jobs/j-1")
        assert r.status_code == 403, (path, r.status_code)
        assert "Access denied" in r.text and "may not" in r.text, path
        assert SECRET not in r.text and "Traceback" not in r.text, path
    # an id that does not exist in a namespace it may not read: 403, not 404 (no
    # existence oracle)
    assert alice.get("/agent?id=globex/jobs/nobody").status_code == 403
    denied = denied_in_audit(keyed)
    assert ("alice", "load", "globex/jobs/j-1") in denied
    assert all(principal == "alice" for principal, _, _ in denied)
    # one refusal in the log per request (the agent page checks once before reading)
    assert len(denied) == 9, denied


def test_an_unknown_principal_sees_nothing(keyed: tuple[str, Path], policy: Policy) -> None:
    with as_client(keyed, policy, "mallory") as c:
        for path in ("/agents", "/agents?sort=desc", "/agents?sort=recent", "/store/count"):
            r = c.get(path)
            assert r.status_code == 403, path
            assert "acme" not in r.text and "globex" not in r.text


def test_writes_need_write_permission(keyed: tuple[str, Path], policy: Policy) -> None:
    from statekeeper.inspector.auth import csrf_token

    csrf = csrf_token(TOKEN)
    with as_client(keyed, policy, "alice", allow_writes=True) as c:
        # read, not write: refused, still there
        r = c.post(
            "/agent/delete",
            data={"id": "acme/billing/inv-7", "confirm": "acme/billing/inv-7", "csrf": csrf},
        )
        assert r.status_code == 403 and "may not delete" in r.text
        assert c.get("/agent?id=acme/billing/inv-7").status_code == 200
        # write, not admin: repair is refused
        r = c.post("/agent/repair", data={"id": "acme/support/t-1", "csrf": csrf})
        assert r.status_code == 403 and "may not repair" in r.text
        # write: allowed (the form gives the head its page showed)
        page = c.get("/agent?id=acme/support/t-2").text
        shown = dict(re.findall(r'name="(head|mark)" value="([^"]*)"', page))
        ok = c.post(
            "/agent/delete",
            data={"id": "acme/support/t-2", "confirm": "acme/support/t-2", "csrf": csrf, **shown},
        )
        assert ok.status_code == 200 and "was deleted" in ok.text
    denied = denied_in_audit(keyed)
    assert ("alice", "delete", "acme/billing/inv-7") in denied
    assert ("alice", "repair", "acme/support/t-1") in denied


def test_a_store_admin_sees_everything(keyed: tuple[str, Path], policy: Policy) -> None:
    with as_client(keyed, policy, "ops") as c:
        assert sorted(ids_on(c.get("/agents?limit=50").text)) == sorted(ACME + GLOBEX)
        assert c.get("/agent?id=globex/jobs/j-1").status_code == 200
        assert 'id="health-detail"' in c.get("/store").text


def test_thread_retention_needs_admin(store_copy: str) -> None:
    """Retention rewrites a thread: write on its namespace is not enough (admin, as
    ``statekeeper retention apply``); refused, the thread keeps every checkpoint."""
    from statekeeper.inspector.auth import csrf_token

    policy = parse_policy(
        '[principals.writer]\nwrite = ["lg/**"]\n\n[principals.keeper]\nadmin = ["lg/**"]\n'
    )
    form = {"thread": "chat-1", "keep_last": "1", "csrf": csrf_token(TOKEN)}
    with make_client(store_copy, principal="writer", policy=policy, allow_writes=True) as c:
        before = len(re.findall(r'<li class="cp ', c.get("/thread?id=chat-1").text))
        assert before > 1
        r = c.post("/thread/retention", data=form)
        assert r.status_code == 403 and "may not retention" in r.text
        assert len(re.findall(r'<li class="cp ', c.get("/thread?id=chat-1").text)) == before
    with make_client(store_copy, principal="keeper", policy=policy, allow_writes=True) as c:
        shown = re.findall(r'data-checkpoint="([^"]+)"', c.get("/thread?id=chat-1").text)
        assert c.post("/thread/retention", data={**form, "up_to": max(shown)}).status_code == 200
        assert len(re.findall(r'<li class="cp ', c.get("/thread?id=chat-1").text)) == 1


def test_metrics_refused_to_a_tenant_are_audited(keyed: tuple[str, Path], policy: Policy) -> None:
    """``/metrics`` (``serve --metrics``) is for admins on ``**``: refused to another
    principal with a 403 — and, as every refusal is, recorded in the audit log
    (before, the 403 left no entry)."""
    with as_client(keyed, policy, "alice", metrics=True) as c:
        refused = c.get("/metrics")
        assert refused.status_code == 403 and "statekeeper_" not in refused.text
    assert ("alice", "metrics", None) in denied_in_audit(keyed)


def test_serving_as_a_principal_the_policy_does_not_name_is_audited(
    keyed: tuple[str, Path], tmp_path: Path
) -> None:
    """``serve --as mallory`` (no such principal in the policy) is refused before it
    listens, and the refusal is in the audit log as every other refusal is."""
    import subprocess
    import sys

    url, keys = keyed
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY_TEXT)
    r = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "--as", "mallory", "--policy", str(policy_file),
         "serve", url, "--key-file", str(keys), "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 4, r.stderr
    assert "mallory" in r.stderr and "does not name it" in r.stderr
    assert "Traceback" not in r.stderr
    assert ("mallory", "serve", None) in denied_in_audit(keyed)
