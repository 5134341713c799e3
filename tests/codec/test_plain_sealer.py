"""``Codec.plain_sealer``: the seal of a short body written out for the group commit's
save — the very record :meth:`Codec.seal` makes, or no sealer where it could not be."""

from __future__ import annotations

import pytest

from statekeeper.codec import Codec
from statekeeper.codec.pipeline import BLAKE3_FROM
from statekeeper.security import Keyring, generate_key


@pytest.mark.parametrize("checksum", [None, "auto", "sha256"])
@pytest.mark.parametrize("size", [0, 2, 700, BLAKE3_FROM - 1])
def test_the_sealer_makes_the_record_seal_makes(checksum: str | None, size: int) -> None:
    codec = Codec(checksum=checksum)
    sealer = codec.plain_sealer()
    assert sealer is not None
    body = (b'{"ops":["' + b"x" * size + b'"]}')[-size:] if size else b""
    assert len(body) == size
    prev = bytes(range(32))
    payload, link = sealer("agent-1", 7, "patch", 1234.5, body, prev)
    sealed = codec.seal("agent-1", 7, "patch", 1234.5, body, prev)
    assert (payload, link, link) == tuple(sealed)
    assert codec.open("agent-1", 7, "patch", 1234.5, payload, link).body == body


@pytest.mark.parametrize(
    "options",
    [{"checksum": "blake3"}, {"compression": "zstd"}, {"keyring": Keyring({"k": generate_key()})}],
    ids=["blake3", "zstd", "keyed"],
)
def test_no_sealer_for_a_codec_that_hashes_otherwise_compresses_or_encrypts(
    options: dict[str, object],
) -> None:
    assert Codec(**options).plain_sealer() is None  # type: ignore[arg-type]
