"""The group-commit batch's arrays, dumped by statekeeper's own binary dumpers, reach
PostgreSQL as the values they were: NULLs, empty arrays, 64-bit ints, non-ASCII text
in the connection's client encoding."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper.backends.postgres.arrays import (
    ADAPTERS,
    Bools,
    Bytes,
    Float8s,
    Int4s,
    Int8s,
    Texts,
)

from ._services import POSTGRES_DSN, require_postgres

CASES: list[tuple[Any, str]] = [
    (Int8s([1, None, 2**62, -(2**63)]), "bigint[]"),
    (Int4s([7, 2**31 - 1, None]), "int[]"),
    (Float8s([1.5, None, -0.25, 1e300]), "float8[]"),
    (Bools([True, False, None]), "boolean[]"),
    (Bytes([b"", b"\x00\xff", None, bytes(range(256))]), "bytea[]"),
    (Bytes([None, None, None]), "bytea[]"),
    (Texts(["agent/1", None, "thé", ""]), "text[]"),
    (Texts([None, None]), "text[]"),
    (Int8s([]), "bigint[]"),
]


@pytest.mark.parametrize("encoding", ["UTF8", "LATIN1"])
def test_the_batch_arrays_round_trip(encoding: str) -> None:
    require_postgres()
    with psycopg.connect(
        POSTGRES_DSN, autocommit=True, context=ADAPTERS, options=f"-c client_encoding={encoding}"
    ) as conn:
        for value, cast in CASES:
            row = conn.execute(f"SELECT %b::{cast}", (value,)).fetchone()
            assert row is not None
            assert row[0] == list(value), cast
