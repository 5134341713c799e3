"""An import of a stream compacted by retention through a tenant's database role under
row-level security (a plain store on that role: the store itself lets it trim). The
write raises the feed's floor in its own transaction now
(``append_from_base(raise_floor=True)``); the role may not update ``sk_feed_floor``, so
that step is left in a savepoint — the stream is written, and the import says the floor
was not raised, as before (was the risk: the refused UPDATE aborting the whole write)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.governance.policy_postgres import enforce_in_postgres, stop_enforcing_in_postgres
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import POSTGRES_DSN
from .test_postgres_row_security import _as
from .test_postgres_row_security_tenants import POLICY, roles

__all__ = ["roles"]


async def test_a_tenant_roles_import_of_a_compacted_stream_writes_it_and_warns(
    roles: tuple[str, str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schema, a_role, b_role = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url) as owner:
        for n in range(5):
            await owner.save("tenant-a/t1", {"n": n})
        await apply_retention(owner, RetentionPolicy.parse("* keep_last=2"))
        out = io.BytesIO()
        await export_agents(owner, ["tenant-a/t1"], out)
        await owner.delete("tenant-a/t1")
        floor_before, _ = await owner.feed_bounds()
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"a-admin": a_role, "b-admin": b_role}
    )
    try:
        with caplog.at_level(logging.WARNING, logger="statekeeper.restore"):
            agents, _, _ = await import_agents(
                f"{_as(a_role)}?schema={schema}", io.BytesIO(out.getvalue())
            )
        assert agents == 1
        assert "floor was not raised" in caplog.text
        async with StateStore(owner_url) as owner:
            assert (await owner.load("tenant-a/t1")).data == {"n": 4}
            assert (await owner.feed_bounds())[0] == floor_before  # not the role's to move
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [a_role, b_role])
