"""A restore stopped right after its writing pass, as a SIGKILL there stops it: the
writers (:func:`write_image`, the writing pass) return, then the run goes no further."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

#: the module (the package's name ``restore`` is the function)
restore_module = importlib.import_module("statekeeper.governance.backup.restore")


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
