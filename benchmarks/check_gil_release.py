"""Does a call release the GIL? (zstd's and AES-GCM's, which a file backup runs in
threads.) The interpreter's switch interval is set to 5 s, so a thread keeps the GIL
until it releases it itself; a pure-Python thread spins and hands the GIL back after
every few thousand steps. While the main thread runs the call over 8 MiB pieces, the
spinner's CPU time over the caller's: ~0 when the call holds the GIL (the spinner
waits: ``bytes.count``), clearly above 0 when it releases it (``os.pread``).
Load-independent: a loaded machine slows both threads, it does not let the spinner
run while the GIL is held.

    python benchmarks/check_gil_release.py /path/to/any/64MB/file
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable

import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statekeeper.governance.backup.pagedelta import page_digests, sha256_page_digests

try:
    from statekeeper.backends._pagepass import zero_run_frame_into
except ImportError:  # (no C page pass built)
    zero_run_frame_into = None


def main() -> None:
    path = sys.argv[1]
    with open(path, "rb") as fh:
        data = fh.read(64 << 20)
    pieces = [data[i : i + (8 << 20)] for i in range(0, len(data), 8 << 20)]
    aes = AESGCM(os.urandom(32))
    out = bytearray((8 << 20) + (8 << 20) // 8 + 64)  # (room for the tag, or a frame's blocks)

    def tagged(piece: bytes) -> memoryview:
        return memoryview(out)[: len(piece) + 16]  # (encrypt_into: the exact length)

    zstd = zstandard.ZstdCompressor(level=-20)
    stop = threading.Event()
    sys.setswitchinterval(5.0)

    def spin() -> None:
        while not stop.is_set():
            for _ in range(2000):
                pass
            time.sleep(0)  # hands the GIL back

    spinner = threading.Thread(target=spin)
    spinner.start()
    clock = time.pthread_getcpuclockid(spinner.ident or 0)
    fd = os.open(path, os.O_RDONLY)

    def share(call: Callable[[bytes], object]) -> float:
        spun, own = time.clock_gettime(clock), time.thread_time()
        for piece in pieces:
            call(piece)
        return (time.clock_gettime(clock) - spun) / max(time.thread_time() - own, 1e-9)

    calls: dict[str, Callable[[bytes], object]] = {
        "bytes.count (holds the GIL)": lambda p: p.count(b"\x01\x02\x03\x04"),
        "os.pread (releases it)": lambda p: os.pread(fd, len(p), 0),
        "zstd -20 compress": zstd.compress,
        "AES-GCM encrypt": lambda p: aes.encrypt(b"0" * 12, p, b"aad"),
        # the page digests of a page backup: one XXH3-128 per 2 KiB page since
        # backup15 (holds the GIL, ~0.2-0.3 us a page), SHA-256 before (hashlib
        # releases the GIL for 2,048 bytes and more), and one SHA-256 over the piece
        "page digests (2 KiB pages)": lambda p: page_digests(p, 2048, 1),
        "SHA-256/16 page digests": lambda p: sha256_page_digests(p, 2048),
        "one SHA-256 per piece": lambda p: hashlib.sha256(p).digest(),
        # what a local page backup's sealing threads run (h/bkwarm): AES-GCM into the
        # frame's place, and the zero-run frame in place of zstd
        "AES-GCM encrypt_into": lambda p: aes.encrypt_into(b"0" * 12, p, b"aad", tagged(p)),
    }
    if zero_run_frame_into is not None:
        calls["zero_run_frame_into"] = lambda p: zero_run_frame_into(p, out)
    try:
        for _ in range(2):
            for name, call in calls.items():
                print(f"{name:28s} spinner CPU / caller CPU = {share(call):.2f}")
            print("load average", os.getloadavg()[0])
    finally:
        stop.set()
        spinner.join()
        os.close(fd)


if __name__ == "__main__":
    main()
