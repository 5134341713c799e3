"""The thread page's *Apply retention* acts on the checkpoints the page showed:
``keep_last`` counts among them, and checkpoints written between the page and the POST
are kept (was: counted from the newest at POST time — with keep_last=1 and two new
checkpoints, the newest one the user saw and one the user never saw were removed). A
form without the checkpoints it showed (an older page) is refused."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from .conftest import make_client

NEW = ("1ef00000-0000-6000-8000-00000000000a", "1ef00000-0000-6000-8000-00000000000b")


def _form(html: str) -> dict[str, str]:
    form = html.split('action="/thread/retention"', 1)[1].split("</form>", 1)[0]
    return dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))


def _listed(html: str) -> list[str]:
    return sorted(set(re.findall(r'data-checkpoint="([^"]+)"', html)))


def _write_two_checkpoints(url: str, parent: str) -> None:
    """Another process (a graph still running) adds two checkpoints to chat-1."""
    from langgraph.checkpoint.base import empty_checkpoint

    from statekeeper.integrations.langgraph import StatekeeperSaver

    with StatekeeperSaver.from_url(url) as saver:
        for n, cid in enumerate(NEW):
            cp: Any = empty_checkpoint()
            cp["id"] = cid
            cp["channel_values"] = {"step": 10 + n}
            cp["channel_versions"] = {"step": f"{10 + n:032}.0"}
            conf = {"thread_id": "chat-1", "checkpoint_ns": "", "checkpoint_id": parent}
            saved = saver.put({"configurable": conf}, cp, {"source": "loop", "step": 10 + n}, {})
            parent = saved["configurable"]["checkpoint_id"]


def test_checkpoints_written_since_the_page_are_kept_and_not_counted(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        page = c.get("/thread?id=chat-1").text
        shown = _listed(page)
        form = _form(page)
        _write_two_checkpoints(store_copy, max(shown))
        r = c.post("/thread/retention", data={**form, "keep_last": "1"})
        assert r.status_code == 200, r.text[:600]
        assert "3 checkpoint(s)" in unescape(r.text)  # of the 4 shown, the newest kept
        after = _listed(c.get("/thread?id=chat-1").text)
        assert after == sorted([max(shown), *NEW])


def test_a_retention_form_without_what_it_showed_is_refused(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        page = c.get("/thread?id=chat-1").text
        form = {k: v for k, v in _form(page).items() if k != "up_to"}
        r = c.post("/thread/retention", data={**form, "keep_last": "1"})
        assert r.status_code == 400, r.text[:600]
        assert "does not say which checkpoints its page showed" in unescape(r.text)
        assert _listed(c.get("/thread?id=chat-1").text) == _listed(page)  # nothing removed
