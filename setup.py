"""The project's one compiled part: a page backup's per-page pass
(``statekeeper.backends._pagepass`` from ``native/pagepass.c``; why native:
``statekeeper/backends/sqlite_pagepass.py``). Everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled (no compiler, no Python
headers) setuptools warns and the install goes on; the package then runs the same pass
in Python (``sqlite_pagepass.python_pass``), as it does with ``STATEKEEPER_PURE=1``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "statekeeper.backends._pagepass",
            sources=["native/pagepass.c", "native/headscan.c"],
            include_dirs=["native"],
            depends=["native/xxhash/xxhash.h", "native/headscan.h"],
            optional=True,
        )
    ]
)
