"""What the schema tests of two application versions on one store share: the store's
URL on each engine (a fresh SQLite file, a fresh PostgreSQL schema dropped after) and
the state newer code (``apps.support_v2``) stores, read back as stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.schema import TypedStates

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from . import apps


@asynccontextmanager
async def store_url(engine: str, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store's URL on ``engine`` ("memory", "sqlite" or "postgres")."""
    if engine == "memory":
        yield "memory://"
    elif engine == "sqlite":
        yield f"sqlite:///{tmp_path / 's.db'}"
    else:
        require_postgres()
        name = namespace(tmp_path)
        drop_schema(name)
        try:
            yield f"{POSTGRES_DSN}?schema={name}"
        finally:
            drop_schema(name)


async def stored_by_v2(url: str, agent_id: str) -> None:
    """``agent_id`` saved by newer code: a ``SupportV2`` with its new field set."""
    async with StateStore(url) as new:
        state = apps.SupportV2(customer="ann", priority=3, escalated=True)
        await TypedStates(new, apps.support_v2).save(agent_id, state)


async def as_stored(url: str, agent_id: str) -> tuple[int, int, dict[str, Any]]:
    """``agent_id``'s head as stored: seq, schema version and data (no model)."""
    async with StateStore(url) as fresh:
        snap = await fresh.load(agent_id)
        return snap.seq, snap.schema_version, snap.data
