"""The project's compiled parts, all optional: a page backup's per-page pass
(``statekeeper.backends._pagepass`` from ``native/pagepass.c``; why native:
``statekeeper/backends/sqlite/pagepass.py``), a replayed run of plain appends checked
and parsed in one call (``statekeeper.codec._appendrun`` from ``native/appendrun.c``,
linked with OpenSSL's libcrypto; why: ``statekeeper/codec/appends.py``), a save's proof
that the old messages are unchanged (``statekeeper.store._stamps`` from ``native/stamps.c``,
CPython 3.11-3.13 with the GIL) and, on x86-64, BLAKE3 at the SIMD unit's full width (``statekeeper.codec._widehash`` from ``native/widehash.c`` and the BLAKE3
team's C and assembly in ``native/blake3``; why: ``statekeeper/codec/widehash.py``).
Everything else is in pyproject.toml.

Where an extension cannot be compiled (no compiler, no Python headers) setuptools warns
and the install goes on; the package then runs the same pass in Python
(``sqlite_pagepass.python_pass``), checks appends record by record in Python, packs the messages it cannot prove
unchanged in Python and hashes with the ``blake3`` package, as it does
with ``STATEKEEPER_PURE=1``.
"""

import platform
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class _BuildExt(build_ext):
    """``.S`` sources (BLAKE3's x86-64 assembly) compiled as C compilers take them."""

    def build_extensions(self) -> None:
        if ".S" not in self.compiler.src_extensions:
            self.compiler.src_extensions.append(".S")
        super().build_extensions()


_B3 = "native/blake3/"
_X86_64 = platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"

setup(
    cmdclass={"build_ext": _BuildExt},
    ext_modules=[
        Extension(
            "statekeeper.backends._pagepass",
            sources=["native/pagepass.c", "native/headscan.c", "native/headpack.c"],
            include_dirs=["native"],
            depends=["native/xxhash/xxhash.h", "native/headscan.h"],
            optional=True,
        ),
        Extension(
            "statekeeper.backends._fileid",
            sources=["native/fileid.c"],
            optional=True,
        ),
        Extension(
            "statekeeper.codec._appendrun",
            sources=["native/appendrun.c"],
            libraries=["crypto"],
            optional=True,
        ),
        Extension(
            "statekeeper.store._stamps",
            sources=["native/stamps.c"],
            optional=True,
        ),
        *(
            [
                Extension(
                    "statekeeper.codec._widehash",
                    sources=[
                        "native/widehash.c",
                        _B3 + "blake3.c",
                        _B3 + "blake3_dispatch.c",
                        _B3 + "blake3_portable.c",
                        *(
                            f"{_B3}blake3_{isa}_x86-64_unix.S"
                            for isa in ("sse2", "sse41", "avx2", "avx512")
                        ),
                    ],
                    include_dirs=["native"],
                    depends=[_B3 + "blake3.h", _B3 + "blake3_impl.h"],
                    optional=True,
                )
            ]
            if _X86_64
            else []
        ),
    ],
)
