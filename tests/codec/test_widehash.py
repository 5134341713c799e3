"""``statekeeper.codec.widehash``: BLAKE3 at full SIMD width (the C module built from
``native/widehash.c``) gives the ``blake3`` package's digest for every input, and a
load's snapshot link is checked with it — a changed byte still fails the load."""

from __future__ import annotations

import os
import platform
import random
import sqlite3
import subprocess
import sys
from typing import Any

import blake3
import pytest

import statekeeper.codec.links as links
import statekeeper.codec.pipeline as pipeline
import statekeeper.codec.sealing as sealing
import statekeeper.codec.widehash as widehash
from statekeeper import StateStore
from statekeeper.codec import Codec

BUILD = (
    "the C hash (statekeeper.codec._widehash) is not built: install the package"
    " (pip install -e .) with a C compiler and Python's headers on x86-64, or set"
    " STATEKEEPER_PURE=1"
)
X86_64 = platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"
DATA = random.Random(11).randbytes((1 << 21) + 4096)


def wide() -> Any:
    assert widehash.wide_blake3 is not None, BUILD
    return widehash.wide_blake3


def test_a_normal_install_on_x86_64_hashes_with_the_c_module() -> None:
    """CI installs the package (``pip install -e '.[dev]'``, a compiler at hand): on
    x86-64 the codec then uses the C hash, unless ``STATEKEEPER_PURE=1`` asks not to."""
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0") or not X86_64:
        assert not widehash.NATIVE
        return
    assert widehash.NATIVE and vars(links)["_wide_blake3"] is widehash.wide_blake3, BUILD
    assert vars(sealing)["_wide_blake3"] is widehash.wide_blake3, BUILD


def test_statekeeper_pure_hashes_with_the_package() -> None:
    code = "from statekeeper.codec import widehash as w; print(w.NATIVE, w.wide_blake3)"
    env = {**os.environ, "STATEKEEPER_PURE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "None"]


@pytest.mark.parametrize("head_len", [0, 1, 40, 63, 64, 1023, 1024, 1025, 2100])
def test_every_length_up_to_five_chunks_hashes_as_the_package(head_len: int) -> None:
    """One chunk (the root), a partial last chunk, whole chunks only, the chunk that
    spans the head's end at every offset: each length and split as ``blake3``."""
    hash_ = wide()
    for n in range(head_len, 5 * 1024 + 2):
        expected = blake3.blake3(DATA[:n]).digest()
        assert hash_(DATA[:head_len], DATA[head_len:n]) == expected, (head_len, n)


@pytest.mark.parametrize("chunks", [*range(5, 70), 127, 128, 129, 255, 256, 257, 2048])
def test_every_round_and_remainder_hashes_as_the_package(chunks: int) -> None:
    """Whole chunks in full SIMD rounds, a last round filled out with dropped lanes or
    left to the narrow paths, every level of parents with and without an odd one
    carried up, the GIL released from 64 chunks, the chaining values on the heap past
    128: lengths just under, at and over each chunk count."""
    hash_ = wide()
    for n in (chunks * 1024 - 1, chunks * 1024, chunks * 1024 + 1, chunks * 1024 + 700):
        for head_len in (0, 35, 1030):
            expected = blake3.blake3(DATA[:n]).digest()
            assert hash_(DATA[:head_len], DATA[head_len:n]) == expected, (chunks, n, head_len)


def test_random_lengths_and_heads_hash_as_the_package() -> None:
    hash_ = wide()
    rnd = random.Random(5)
    for _ in range(400):
        n = rnd.randrange(0, 300_000)
        head_len = rnd.randrange(0, min(n, 3000) + 1)
        expected = blake3.blake3(DATA[:n]).digest()
        assert hash_(DATA[:head_len], memoryview(DATA)[head_len:n]) == expected, (n, head_len)


def test_a_snapshot_is_sealed_and_checked_by_the_c_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """``seal`` (a snapshot's write) and ``decode_view`` (a load at a snapshot) hash a
    BLAKE3 record's link input with the C hash, the head and the stored bytes apart:
    the digest is the package's over the joined link input, the record's checksum."""
    hash_ = wide()
    calls: list[tuple[bytes, bytes]] = []

    def spy(head: bytes, body: bytes) -> bytes:
        calls.append((head, body))
        digest: bytes = hash_(head, body)
        return digest

    monkeypatch.setattr(sealing, "_wide_blake3", spy)  # (seal)
    monkeypatch.setattr(links, "_wide_blake3", spy)  # (_plain_link: decode_view)
    codec = Codec(checksum="blake3")
    doc = {"data": {"messages": [{"c": "x" * 300, "n": i} for i in range(100)]}}
    sealed = codec.encode("a", 7, "snapshot", 2.5, doc)
    viewed = codec.decode_view("a", 7, "snapshot", 2.5, sealed.payload, sealed.checksum)
    assert viewed is not None and viewed[0] == doc and viewed[2] == sealed.checksum
    assert [body for _, body in calls] == [sealed.payload, sealed.payload]
    head = b"sk-link/1" + pipeline._names("a", "snapshot") + pipeline._seq_ts.pack(7, 2.5)
    assert calls[0][0] == calls[1][0] == head
    assert blake3.blake3(head + sealed.payload).digest() == sealed.checksum


async def test_a_changed_snapshot_byte_is_caught_by_a_cold_load(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With the C hash checking it, a snapshot with one byte changed (in its body, its
    link, its header) is caught by a cold load, as before: the snapshot is refused
    ("snapshot record checksum mismatch", at its seq) and the state comes from the
    events, whole and right."""
    wide()
    url = f"sqlite:///{tmp_path}/s.db"
    msgs = [{"role": "user", "content": "m" * 300, "i": i} for i in range(100)]
    async with StateStore(url, snapshot_every=100, witness=False) as store:
        for i in range(100):
            await store.save("a", {"messages": msgs[: i + 1]})
    with sqlite3.connect(f"{tmp_path}/s.db") as conn:
        seq, payload = conn.execute(
            "SELECT seq, payload FROM sk_snapshots ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    assert seq == 100 and payload[1] & 0x40  # (a BLAKE3 record: 32 KB, "auto")
    async with StateStore(url, cache_size=0, witness=False) as store:
        assert (await store.load("a")).data == {"messages": msgs}
    assert "checksum mismatch" not in caplog.text
    for at in (40, len(payload) // 2, len(payload) - 1, 5):
        changed = bytearray(payload)
        changed[at] ^= 0x01
        with sqlite3.connect(f"{tmp_path}/s.db") as conn:
            conn.execute("UPDATE sk_snapshots SET payload = ? WHERE seq = 100", (bytes(changed),))
        caplog.clear()
        async with StateStore(url, cache_size=0, witness=False) as store:
            assert (await store.load("a")).data == {"messages": msgs}
        assert "snapshot at seq 100 is unusable (snapshot record checksum mismatch)" in (
            caplog.text
        ), at
