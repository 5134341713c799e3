"""A page backup's page digests (``page_hash``): XXH3-128 seeded by a value derived
from the backup key (``"xxh3-128/seeded"``) since backup15; what the code before
wrote (``"sha256/16"``: the first 16 bytes of each page's SHA-256) still restores,
and an incremental by pages after such a parent goes on by pages.

The digests are not what refuses an edited page: every chunk is an AES-256-GCM frame
under the backup key, named in the manifest by its tag, and the manifest is such a
frame too. The tests below check each of those refusals on a chain of the new kind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import xxhash

from statekeeper import StateStore
from statekeeper.errors import BackupCorrupt
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import FrameReader

from ._point_in_time import keyring
from .test_backup_file import reseal_manifest
from .test_backup_page_delta import contents, fill, manifest, page_incremental, refused

DATA = Path(__file__).parent / "data"
#: the key ``data/v5_pages_sha256_main.skb`` and ``data/v6_pages_sha256_main.skb``
#: were written with (by the code of b6a9f9f: a full page backup and an incremental
#: by pages after it, page digests ``"sha256/16"``)
OLD_KEY = bytes(range(32, 64))


def old_chain(folder: Path) -> list[Path]:
    files = [folder / "old-full.skb", folder / "old-inc.skb"]
    shutil.copy(DATA / "v5_pages_sha256_main.skb", files[0])
    shutil.copy(DATA / "v6_pages_sha256_main.skb", files[1])
    return files


async def test_a_page_chain_digested_by_sha256_still_restores(tmp_path: Path) -> None:
    """The store the fixtures were made of: 6 agents ``t{i % 2}/a{i}`` of 4 events
    (an idempotency key ``k{i}`` at seq 2); then ``t0/a0`` saved once more,
    ``t1/a7`` created, ``t1/a5`` deleted (the incremental)."""
    bkey = BackupKey(OLD_KEY)
    files = old_chain(tmp_path)
    for file, version in zip(files, (5, 6), strict=True):
        assert manifest(file, bkey)[0] == version
        assert manifest(file, bkey)[1]["page_hash"] == "sha256/16"
    async with StateStore(f"sqlite:///{tmp_path / 'full.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, files[:1], bkey)).agents == 6
        assert (await dst.load("t0/a0")).data == {"i": 0, "j": 3}
    async with StateStore(f"sqlite:///{tmp_path / 'both.db'}", keyring=keyring()) as dst:
        result = await restore(dst, files, bkey)
        assert result.agents == 6
        assert (await dst.verify()).ok
        got = await contents(dst)
        assert got["t0/a0"] == (5, {"i": 0, "j": 4}) and got["t1/a7"] == (1, {"i": 7, "j": 0})
        assert "t1/a5" not in got and got["t1/a3"] == (4, {"i": 3, "j": 3})
        assert (await dst.save("t1/a3", {"i": 3, "j": 1}, idempotency_key="k3")).duplicate


async def test_an_incremental_after_a_sha256_parent_goes_on_by_pages(tmp_path: Path) -> None:
    """Its pages are compared with the parent's by the parent's kind of digest, and
    listed by the new one: the next incremental compares by that. The whole chain,
    old and new files, restores the source."""
    bkey = BackupKey(OLD_KEY)
    files = old_chain(tmp_path)
    files += [tmp_path / "inc1.skb", tmp_path / "inc2.skb"]
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await restore(src, files[:2], bkey)
        await src.save("t0/a0", {"on": "new"})
        await page_incremental(src, files[2], bkey, files[1])
        assert manifest(files[2], bkey)[1]["page_hash"] == "xxh3-128/seeded"
        await src.save("t0/a2", {"on": "newer"})
        await page_incremental(src, files[3], bkey, files[2])
        expected = await contents(src)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, files, bkey)
        assert await contents(dst) == expected
        assert (await dst.verify()).ok


@pytest.fixture
async def made(tmp_path: Path) -> tuple[BackupKey, list[Path]]:
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / f"{n}.skb" for n in ("full", "inc")]
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 30)
        await backup(src, files[0], bkey)
        await src.save("t0/a000", {"one": 1})
        await page_incremental(src, files[1], bkey, files[0])
    return bkey, files


def pages_of(files: list[Path], key: BackupKey) -> bytes:
    """The full backup's image (its chunks, each authenticated)."""
    reader = FrameReader(files[0], key)
    try:
        return b"".join(reader.file_chunks())
    finally:
        reader.close()


async def test_page_digests_are_xxh3_128_seeded_by_the_backup_key(
    tmp_path: Path, made: tuple[BackupKey, list[Path]]
) -> None:
    """A digest is XXH3-128 of the page under a 64-bit seed derived from the backup
    key (HKDF, label "page digest seed"): not 0, not the same for another key."""
    bkey, files = made
    version, body = manifest(files[0], bkey)
    assert version == 5 and body["page_hash"] == "xxh3-128/seeded"
    image = pages_of(files, bkey)
    size = body["page_size"]
    pages = [image[at : at + size] for at in range(0, len(image), size)]
    assert len(pages) == body["pages"]
    seed = bkey.page_seed
    assert seed != 0 and seed != BackupKey(os.urandom(32)).page_seed
    expected = b"".join(xxhash.xxh3_128_digest(p, seed=seed) for p in pages)
    assert body["page_digests"] == expected
    assert body["page_digests"] != b"".join(xxhash.xxh3_128_digest(p) for p in pages)


def flipped(file: Path, at: int) -> None:
    data = bytearray(file.read_bytes())
    data[at] ^= 0x01
    file.write_bytes(bytes(data))


async def test_an_edited_page_chunk_or_manifest_is_refused(
    tmp_path: Path, made: tuple[BackupKey, list[Path]]
) -> None:
    """What refuses each edit, nothing restored (:class:`BackupCorrupt`): a byte of a
    page in the full backup's or the incremental's chunk (its AES-GCM frame), a byte
    of a manifest (its frame), a manifest sealed again with the backup key whose page
    digests are unseeded XXH3 of the same pages (the check is the seeded digest)."""
    bkey, files = made
    originals = [f.read_bytes() for f in files]

    def reset() -> None:
        for file, data in zip(files, originals, strict=True):
            file.write_bytes(data)

    for which in (0, 1):
        chunk = manifest(files[which], bkey)[1]["chunks"][0]
        flipped(files[which], chunk["offset"] + chunk["length"] // 2)
        message = await refused(tmp_path, files, bkey, BackupCorrupt)
        assert "chunk 0" in message and "authentication" in message, message
        reset()
        flipped(files[which], len(originals[which]) - 40)  # inside the manifest frame
        message = await refused(tmp_path, files, bkey, BackupCorrupt)
        assert "manifest" in message and "authentication" in message, message
        reset()

    # the restore's check of the rebuilt image against the last manifest's digests
    # uses the seeded hash: the same pages digested without the seed are refused
    image = bytearray(pages_of(files, bkey))
    body = manifest(files[1], bkey)[1]
    size = body["page_size"]
    reader = FrameReader(files[1], bkey)
    try:
        shipped = b"".join(reader.file_chunks())
    finally:
        reader.close()
    changed = [
        int.from_bytes(body["changed"][i : i + 4], "big") for i in range(0, len(body["changed"]), 4)
    ]
    for n, pageno in enumerate(changed):
        at = (pageno - 1) * size
        image[at : at + size] = shipped[n * size : (n + 1) * size]
    del image[body["pages"] * size :]
    pages = [bytes(image[at : at + size]) for at in range(0, len(image), size)]
    seeded = b"".join(xxhash.xxh3_128_digest(p, seed=bkey.page_seed) for p in pages)
    assert seeded == body["page_digests"]  # the image rebuilt here is the restore's
    unseeded = b"".join(xxhash.xxh3_128_digest(p) for p in pages)
    files[1].write_bytes(
        reseal_manifest(originals[1], bkey, lambda m: m.__setitem__("page_digests", unseeded))
    )
    message = await refused(tmp_path, files, bkey, BackupCorrupt)
    assert "page digests" in message, message
