"""``retention apply`` run as a tenant's administrator (``admin`` on ``acme/**`` only)
leaves the change feed every tenant shares untrimmed (h/trialgov); each action's
``reason`` said so, but a compaction's line does not print its reason, so the CLI said
nothing: the admin was not told that subscribers behind pass over the removed events
silently, nor that the feed keeps its entries for them. It now prints one line, and
none in a store administrator's run (whose floor line it prints as before)."""

from __future__ import annotations

from pathlib import Path

from statekeeper import SyncStateStore

from ..cli._subprocess import cli_in_process

_POLICY = """[principals.acme-admin]
admin = ["acme/**"]
[principals.ops]
admin = ["**"]
"""
_RULE = "acme keep_last=1"


def _store(tmp_path: Path) -> tuple[str, Path]:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as store:
        store.save("globex/g1", {"n": 0})
        for n in range(4):
            store.save("acme/a1", {"n": n})
    policy = tmp_path / "policy.toml"
    policy.write_text(_POLICY)
    return url, policy


def test_a_tenant_admins_run_says_the_shared_floor_was_not_raised(tmp_path: Path) -> None:
    url, policy = _store(tmp_path)
    args = ("--policy", str(policy), "retention", "apply", "--db", url, "--rule", _RULE)
    dry = cli_in_process("--as", "acme-admin", *args, "--dry-run")
    assert dry.code == 0, str(dry)
    assert "floor would not rise" in dry.stdout, str(dry)
    run = cli_in_process("--as", "acme-admin", *args)
    assert run.code == 0, str(run)
    assert "acme/a1: removed 3 event(s)" in run.stdout, str(run)
    assert "floor was not raised" in run.stdout and "admin of every namespace" in run.stdout
    assert "rose to" not in run.stdout, str(run)
    with SyncStateStore(url) as store:
        assert store.head("acme/a1") == 4
        assert max(store.feed_cursor_bounds().floor.positions) == 0


def test_a_store_admins_run_raises_it_and_says_nothing_more(tmp_path: Path) -> None:
    url, policy = _store(tmp_path)
    args = ("--policy", str(policy), "retention", "apply", "--db", url, "--rule", _RULE)
    run = cli_in_process("--as", "ops", *args)
    assert run.code == 0, str(run)
    assert "floor rose to" in run.stdout and "not raised" not in run.stdout, str(run)
