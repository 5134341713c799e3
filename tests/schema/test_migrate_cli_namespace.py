"""``statekeeper --namespace NS migrate`` and ``schema status`` work on the namespace's
agents only, as the API's namespaced migration does (the CLI refused --namespace for
them), with the same --as/--policy checks: admin on the namespace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from statekeeper import StateStore
from statekeeper.schema import TypedStates

from . import apps
from .test_migrate_cli import _cli, _stored

IDS = ("acme/a-1", "acme/eu/a-2", "globex/g-1", "loose")


def _populate(url: str) -> None:
    async def go() -> None:
        async with StateStore(url) as store:
            states = TypedStates(store, apps.support_v1)
            for agent_id in IDS:
                await states.create(agent_id, apps.SupportV1(customer_name=agent_id))

    asyncio.run(go())


def _versions(url: str) -> dict[str, int]:
    async def go() -> dict[str, int]:
        async with StateStore(url) as store:
            return {a: (await store.load(a)).schema_version or 0 for a in IDS}

    return asyncio.run(go())


def test_migrate_and_schema_status_in_a_namespace_touch_only_its_agents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _populate(url)
    app = ["--app", "tests.schema.apps:v2"]
    status = _cli("--namespace", "acme", "--db", url, "schema", "status", *app, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["versions"] == {"1": 2}  # acme/a-1, acme/eu/a-2
    journal = str(tmp_path / "acme.json")
    run = _cli("--namespace", "acme", "--db", url, "migrate", *app, "--journal", journal, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["changed"] == 2 and report["verified"] == 2
    assert _versions(url) == {"acme/a-1": 2, "acme/eu/a-2": 2, "globex/g-1": 1, "loose": 1}
    # the journal of acme's run is not globex's: refused, nothing written
    before = _stored(tmp_path / "s.db")
    other = _cli("--namespace", "globex", "--db", url, "migrate", *app, "--journal", journal)
    assert other.returncode != 0 and "namespace 'acme'" in other.stderr, other.stderr
    assert _stored(tmp_path / "s.db") == before
    back = _cli(
        "--namespace", "acme", "--db", url, "migrate", *app, "--journal", journal, "--rollback"
    )
    assert back.returncode == 0, back.stderr
    assert set(_versions(url).values()) == {1}
    again = _cli("--namespace", "acme", "--db", url, "migrate", *app, "--journal", journal)
    assert again.returncode == 0, again.stderr
    final = _cli(
        "--namespace", "acme", "--db", url, "migrate", *app, "--journal", journal, "--finalize"
    )
    assert final.returncode == 0, final.stderr
    assert _versions(url) == {"acme/a-1": 2, "acme/eu/a-2": 2, "globex/g-1": 1, "loose": 1}


def test_a_namespaced_migration_as_a_principal_needs_admin_on_that_namespace(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    _populate(url)
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.tenant]\nadmin = ["acme/**"]\n')
    common = ["--as", "tenant", "--policy", str(policy), "--db", url]
    app = ["--app", "tests.schema.apps:v2", "--journal", str(tmp_path / "j.json"), "--json"]
    before = _stored(db)
    refused = _cli("--namespace", "globex", *common, "migrate", *app)
    assert refused.returncode == 4, refused.stderr
    assert "may not migrate" in refused.stderr and "globex" in refused.stderr
    whole = _cli(*common, "migrate", *app)  # no namespace: the whole store, needs **
    assert whole.returncode == 4 and "every namespace" in whole.stderr, whole.stderr
    assert _stored(db) == before
    done = _cli("--namespace", "acme", *common, "migrate", *app)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] == 2
    assert _versions(url)["globex/g-1"] == 1
    # a rollback rewrites records as a migration does: the same check (it had none)
    migrated = _stored(db)
    for namespace in (["--namespace", "globex"], []):
        back = _cli(*namespace, *common, "migrate", *app, "--rollback")
        assert back.returncode == 4 and "may not migrate" in back.stderr, back.stderr
    assert _stored(db) == migrated
    back = _cli("--namespace", "acme", *common, "migrate", *app, "--rollback")
    assert back.returncode == 0, back.stderr
    assert set(_versions(url).values()) == {1}
