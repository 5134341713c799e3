"""Whether a change may have landed when S3 answers one of its requests with an error
part-way: :class:`Landed`, read by :meth:`~.objects.S3Objects._call` when it tells a
botocore ``ClientError`` as :class:`~statekeeper.errors.BackendError`.

An operation of the S3 backend (a prune, a rewrite, a delete, an append) is one call
on the backend's thread pool making several requests: a rewrite's claim, then each
commit it rewrites; a prune's copy, then its switch (the base object), then its
deletes. A ``ClientError`` at the third request of a prune whose switch had landed was
told ``maybe_applied=False`` (nothing written), and its caller (retention, a rekey, a
migration) counted a change that stands as not made. Now it is ``maybe_applied=True``
once any write request of the call was answered with success (botocore's
``after-call`` event, on the pool thread the call runs on), or when the request that
failed was a write that may have landed itself (answered 5xx, or sent more than once:
an earlier try's reply lost); False only when no write of the call can have landed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .base import ClientError, T, _retried

__all__ = ["Landed", "may_have_landed"]

#: the HTTP methods of S3 requests that write nothing
_READS = frozenset({"GET", "HEAD"})

#: the attribute a ``ClientError`` leaving :meth:`Landed.run` carries: whether a write
#: of the call may have landed
MAY_HAVE_LANDED = "statekeeper_may_have_landed"


class Landed:
    """The writes of the call running on each thread of the backend's pool."""

    def __init__(self, service_model: Any) -> None:
        self._model = service_model
        self._local = threading.local()

    def _writes(self, operation: str) -> bool:
        """Whether the S3 operation ``operation`` may write (one unknown: taken for a write)."""
        try:
            method = self._model.operation_model(operation).http.get("method", "")
        except Exception:
            return True
        return str(method).upper() not in _READS

    def note(
        self, http_response: Any = None, model: Any = None, parsed: Any = None, **_: Any
    ) -> None:
        """botocore's ``after-call`` event of the backend's client: a write that may have
        landed is noted for the call running on this thread — one answered with
        success, or with an error after botocore sent it more than once (an earlier
        try's reply lost: that try may have landed, and the caller may take the error
        for its own write, a 412 met by :meth:`~.objects.S3Objects._ours`) or a 5xx.
        Was: success alone — a retried switch of a prune recognised as its own, then a
        refusal, said nothing had landed."""
        if http_response is None or model is None:
            return
        if str(model.http.get("method", "")).upper() in _READS:
            return
        status = int(http_response.status_code)
        if status < 300 or status >= 500 or _attempts(parsed) > 0:
            self._local.wrote = True
            self._local.writes = self.writes() + 1

    def writes(self) -> int:
        """How many writes of the call running on this thread may have landed so far
        (:meth:`note`): a step of the call compares it before and after (a rewrite's
        commits, past its claim: :meth:`~.rewrites.S3Rewrites._rewrite_sync`)."""
        return int(getattr(self._local, "writes", 0))

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on this thread: a ``ClientError`` out of it carries
        :data:`MAY_HAVE_LANDED`."""
        self._local.wrote = False
        self._local.writes = 0
        try:
            return fn(*args)
        except ClientError as exc:
            unsure = self._writes(str(getattr(exc, "operation_name", "") or "")) and (
                _status(exc) >= 500 or _retried(exc)
            )
            setattr(exc, MAY_HAVE_LANDED, bool(self._local.wrote) or unsure)
            raise
        finally:
            self._local.wrote = False
            self._local.writes = 0


def _attempts(parsed: Any) -> int:
    """The retries botocore made of the request answered ``parsed`` (0 when unknown)."""
    try:
        return int(parsed.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


def _status(exc: ClientError) -> int:
    """The HTTP status S3 answered ``exc`` with (0 when none is known)."""
    try:
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    except (TypeError, ValueError):
        return 0


def may_have_landed(exc: BaseException) -> bool:
    """Whether a write of the call ``exc`` (a ``ClientError`` out of :meth:`Landed.run`)
    ended may have landed."""
    return bool(getattr(exc, MAY_HAVE_LANDED, False))
