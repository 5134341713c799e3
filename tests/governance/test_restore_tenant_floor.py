"""A restore or an import of a stream retention compacted raises the target's feed floor
over it, only for a principal that may trim the feed every tenant shares (as retention
does). For a tenant's admin it was left alone without a word, while retention run by the
same principal says so: a projection rebuilt there from position 0 then counts only the
events kept after the base. The restore and the import now warn, naming a stream."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.governance import parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

POLICY = parse_policy(
    """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)
KEY = BackupKey(b"k" * 32)


async def _compacted(tmp_path: Path) -> tuple[Path, bytes]:
    with fresh_url("sqlite", tmp_path, "src.db") as url:
        async with StateStore(url) as store:
            for n in range(12):
                await store.save("acme/x", {"n": n}, fsm_state=f"s{n % 3}", actor="bot")
            await apply_retention(store, RetentionPolicy.parse("acme keep_last=4"))
            await backup(store, tmp_path / "full.skb", KEY)
            out = io.BytesIO()
            await export_agents(store, None, out)
    return tmp_path / "full.skb", out.getvalue()


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "floor was not raised" in r.getMessage()]


async def test_a_tenant_admins_restore_says_the_feed_floor_was_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made, _ = await _compacted(tmp_path)
    with fresh_url("sqlite", tmp_path, "dst.db") as url:
        async with StateStore(url) as whole:
            acme = StateStore(whole.backend, principal="acme-admin", policy=POLICY)
            with caplog.at_level(logging.WARNING, logger="statekeeper.restore"):
                await restore(acme, [made], KEY)
            assert (await whole.feed_bounds())[0] == 0  # left alone, as retention leaves it
            said = _said(caplog)
            assert len(said) == 1 and "1 stream(s)" in said[0] and "'acme/x'" in said[0]


async def test_a_store_admins_restore_raises_it_and_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made, _ = await _compacted(tmp_path)
    with fresh_url("sqlite", tmp_path, "dst.db") as url:
        async with StateStore(url) as whole:
            ops = StateStore(whole.backend, principal="ops", policy=POLICY)
            with caplog.at_level(logging.WARNING, logger="statekeeper.restore"):
                await restore(ops, [made], KEY)
            assert (await whole.feed_bounds())[0] >= 1
            assert _said(caplog) == []


async def test_a_tenant_admins_import_says_it_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, exported = await _compacted(tmp_path)
    with fresh_url("sqlite", tmp_path, "dst.db") as url:
        async with StateStore(url) as whole:  # import never creates a store
            await whole.save("made/by-init", {})
            await whole.delete("made/by-init")
        monkeypatch.setenv("STATEKEEPER_PRINCIPAL", "acme-admin")
        policy = tmp_path / "policy.toml"
        policy.write_text('[principals.acme-admin]\nadmin = ["acme/**"]\n')
        monkeypatch.setenv("STATEKEEPER_POLICY", str(policy))
        with caplog.at_level(logging.WARNING, logger="statekeeper.restore"):
            await import_agents(url, io.BytesIO(exported))
        async with StateStore(url) as whole:
            assert await whole.head("acme/x") == 12
            assert (await whole.feed_bounds())[0] == 0
        assert len(_said(caplog)) == 1
