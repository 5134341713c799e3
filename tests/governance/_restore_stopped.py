"""A restore stopped right after its writing pass, as a SIGKILL there stops it: the
writers (:func:`write_image`, the writing pass) return, then the run goes no further;
and a restore as a version before the key adoption made it (:func:`older_restore`)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

#: the module (the package's name ``restore`` is the function)
restore_module = importlib.import_module("statekeeper.governance.backup.restore")


@contextlib.contextmanager
def older_restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A restore as made before the key adoption (``adopt_copied_keys``): the copy's
    key family given no key of the agents it copied."""

    async def older(*_: object) -> int:
        return 0

    with monkeypatch.context() as patched:
        patched.setattr(restore_module, "adopt_copied_keys", older)
        yield


class Killed(Exception):
    """Stands for the SIGKILL: the restore goes no further."""


def _stopping_after(write: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrote(*args: Any, **kwargs: Any) -> Any:
        written = await write(*args, **kwargs)
        if written is not None:  # (the image writer declines with None on some engines)
            raise Killed("stopped right after the agents were written")
        return written

    return wrote


@contextlib.contextmanager
def stopped_after_writing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inside, a restore raises :class:`Killed` once it wrote the agents."""
    with monkeypatch.context() as patch:
        for name in ("write_image", "_write_all"):
            patch.setattr(restore_module, name, _stopping_after(getattr(restore_module, name)))
        yield
