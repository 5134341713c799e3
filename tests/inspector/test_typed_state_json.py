"""The inspector's state download keeps typed values typed (trialtime): a Decimal, a
set or bytes made it fail, and a datetime or UUID came out as a plain string (read back
as one). They are written in the tagged form ``statekeeper export`` writes."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.codec.types import from_plain

from .conftest import make_client

DATA: dict[str, Any] = {
    "price": Decimal("1.10"),
    "blob": b"\x00\xff",
    "at": datetime(2025, 1, 31, 12, tzinfo=UTC),
    "id": uuid.UUID(int=5),
    "tags": {"a"},
    "own": {"$t": "uuid", "v": "x"},
}


def test_the_state_download_reads_back_as_stored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typed.db'}"

    async def seed() -> None:
        async with StateStore(url) as store:
            await store.save("typed-1", DATA)

    asyncio.run(seed())
    client: Any
    with make_client(url) as client:
        whole = client.get("/agent/state.json?id=typed-1")
        assert whole.status_code == 200, whole.text
        data = whole.json()["data"]
        assert data["at"] == {"$t": "datetime", "v": "2025-01-31T12:00:00+00:00"}
        assert from_plain(data, None) == DATA
