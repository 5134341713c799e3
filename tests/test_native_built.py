"""A normal install builds every compiled part, and the package uses it.

Each extension in ``setup.py`` is ``optional=True``: where a compiler or a header is
missing, setuptools only warns and the package runs the same work in Python. That is
the right fallback for users, and the wrong one for CI: a build that stopped compiling
(a header renamed, a new warning made an error, OpenSSL's headers gone from the image)
would pass every test on the pure paths, slower and unnoticed. The modules' own tests
skip where their module is missing; this file is the one that fails instead, on the
platforms CI builds for (CPython 3.11-3.13 on Linux x86-64, with the GIL), unless
``STATEKEEPER_PURE=1`` asks for the pure paths.
"""

from __future__ import annotations

import os
import platform
import sys

import pytest

import statekeeper.backends.sqlite.fileid as fileid
import statekeeper.backends.sqlite.pagepass as pagepass
import statekeeper.codec.appends as appends
import statekeeper.codec.widehash as widehash
import statekeeper.store.proofs as proofs

BUILD = (
    "is not built or not used: install the package with `pip install -e '.[dev]'` on a"
    " machine with a C compiler, Python's headers and OpenSSL's (libssl-dev); `.ci/run`"
    " installs them"
)
PURE = os.environ.get("STATEKEEPER_PURE", "") not in ("", "0")
BUILT_HERE = (
    sys.implementation.name == "cpython"
    and (3, 11) <= sys.version_info[:2] <= (3, 13)
    and sys.platform == "linux"
    and platform.machine().lower() in ("x86_64", "amd64")
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)

pytestmark = pytest.mark.skipif(
    PURE or not BUILT_HERE,
    reason="STATEKEEPER_PURE is set, or a platform CI does not build the C parts for",
)


def test_the_page_pass_is_the_c_one() -> None:
    assert pagepass.NATIVE, f"statekeeper.backends._pagepass {BUILD}"


def test_file_ids_come_from_the_c_module() -> None:
    assert fileid.NATIVE, f"statekeeper.backends._fileid {BUILD}"


def test_replayed_appends_are_checked_in_c() -> None:
    assert appends._APPEND_NATIVE is not None, f"statekeeper.codec._appendrun {BUILD}"


def test_message_proofs_are_version_tags() -> None:
    # (a build from before ``seal`` counts as not built: proofs.py refuses it)
    assert proofs.NATIVE, f"statekeeper.store._stamps {BUILD} (or is a stale build)"


def test_blake3_runs_at_the_simd_width() -> None:
    assert widehash.NATIVE, f"statekeeper.codec._widehash {BUILD}"
