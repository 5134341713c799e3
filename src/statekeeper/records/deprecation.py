"""The records' deprecated names: the decorator that marks a deprecated method or property
(to mypy, ``typing_extensions.deprecated``; at run time a warning) and the warning of a
deprecated keyword (:func:`_renamed`)."""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING

__all__ = ["_renamed", "deprecated"]

if TYPE_CHECKING:  # mypy (run with the "deprecated" error code) flags every use
    from typing_extensions import deprecated
else:  # at run time a warning, without importing typing_extensions (~20 ms measured
    # with -X importtime on first use of the store, which did not import it before)
    def deprecated(message):
        def wrap(fn):
            @functools.wraps(fn)
            def warned(*args, **kwargs):
                warnings.warn(message, DeprecationWarning, stacklevel=2)
                return fn(*args, **kwargs)

            return warned

        return wrap


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)
