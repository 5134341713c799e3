"""A server, database or role with a low ``extra_float_digits`` (``ALTER ROLE app SET
extra_float_digits = -14``; ``0`` was PostgreSQL's default before version 12): floats
read back in text form are rounded to that many fewer digits. statekeeper's sessions
ask for every digit, so a lease's expiry (seconds since the epoch, read as text) is the
one the server stored.

Before, a lease granted for 30 s on a role with ``extra_float_digits = -15`` reported
``expires_at`` 2000000000.0 (one significant digit: years away, or already past for
another grant), and what decides on it — whether a grant whose reply was lost is
recognised, whether another holder's lease is still running — decided on that.
"""

from __future__ import annotations

import time

import pytest

from statekeeper.backends import PostgresBackend

from ._services import private_postgres

pytestmark = pytest.mark.slow


async def test_a_lease_expiry_is_read_whole_whatever_the_float_digits() -> None:
    with private_postgres({"extra_float_digits": -15}) as server:
        backend = PostgresBackend(server.dsn)
        try:
            before = time.time()
            granted = await backend.acquire_lease("a", "worker-1", 30.0)
            after = time.time()
            # the server's clock is this machine's: the expiry is 30 s after the grant
            assert before + 29 < granted.expires_at < after + 31
            stored = await backend.get_lease("a")
            assert stored is not None and stored.expires_at == granted.expires_at
        finally:
            await backend.close()
