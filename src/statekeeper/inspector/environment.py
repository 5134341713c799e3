"""The inspector's Jinja2 environment: its templates, with autoescaping, and the
filters and values they use (times, sizes, JSON, query strings, the size caps)."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlencode

import jinja2

from ..codec.types import shown
from . import pages
from .capped import CHANGES_BUDGET, STATE_BUDGET, capped
from .changes import pretty

__all__ = ["environment"]

HERE = Path(__file__).parent


def _iso(ts: float | None) -> str:
    if ts is None:  # 0 is the epoch, a real time
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def environment() -> jinja2.Environment:
    """The environment every page and fragment is rendered with."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["iso"] = _iso
    env.filters["ago"] = lambda ts: pages.ago(time.time() - ts) if ts else "-"
    env.filters["bytes"] = pages.human_bytes
    env.filters["pretty"] = pretty
    env.filters["qs"] = lambda params: urlencode(params)
    env.globals["problem_help"] = pages.problem_help
    # a large document is cut to a budget (capped.py): the page says what it left out
    # (typed values tagged, as an export writes them: bytes were shown as a list of
    # numbers, a datetime or UUID as a plain string)
    env.filters["capped"] = lambda value, *budget: capped(shown(value), *budget)
    env.filters["total"] = lambda value: getattr(value, "total", None) or len(value)
    env.filters["omitted"] = lambda value: getattr(value, "omitted", 0)
    env.globals["state_budget"] = STATE_BUDGET
    env.globals["changes_budget"] = CHANGES_BUDGET
    return env
