"""A page of rewrites checked whole before any of it is written: the memory engine's
:meth:`~statekeeper.backends.base.Backend.rewrite_many` (it sets ``rewrites_many``: a
page is committed together). A request refused (an event not stored, a snapshot below
its stream's base: :mod:`.pruned_snapshots`) raises before anything of the page is
written, as SQLite's transaction and PostgreSQL's statement refuse theirs. Was: the
default applied the requests in turn, those before the refused one stayed written,
and a schema migration's page, told "committed together", took the error for none
written (its audit entries voided as not applied, its cached states kept)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import ConflictError
from ..records import RewriteRequest
from .base import validate_rewrite

__all__ = ["checked_page"]


def checked_page(
    requests: Sequence[RewriteRequest],
    check: Callable[[RewriteRequest], None],
    apply: Callable[[RewriteRequest], None],
) -> list[bool]:
    """``requests`` (distinct agents) each validated and ``check``-ed (ConflictError: not
    applied, False; any other error raised, nothing written), then the others
    ``apply``-ed. No suspension point from the first check to the last write."""
    for request in requests:
        validate_rewrite(request)
    done: list[bool] = []
    for request in requests:
        try:
            check(request)
        except ConflictError:
            done.append(False)
        else:
            done.append(True)
    for request, ok in zip(requests, done, strict=True):
        if ok:
            apply(request)
    return done
