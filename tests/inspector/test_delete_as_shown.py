"""The agent page's *Delete* deletes the agent as the page showed it: a write landing
between the page and the POST (or the agent deleted and made again meanwhile) is never
deleted — 409, nothing deleted, the head now named (was: the delete removed writes the
user never saw and the page said "was deleted"). A form without the head it showed
(an older inspector's page) is refused. The interleavings are made by writing between
the GET and the POST."""

from __future__ import annotations

import asyncio
import re
from html import unescape

from statekeeper import StateStore, SyncStateStore
from statekeeper.inspector.live import head_events

from .conftest import make_client


def _delete_form(html: str) -> dict[str, str]:
    """The hidden fields of the page's delete form, and its confirmation filled in."""
    form = html.split('action="/agent/delete"', 1)[1].split("</form>", 1)[0]
    fields = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))
    return {**fields, "confirm": unescape(fields["id"])}


def _head(url: str, agent_id: str) -> int:
    with SyncStateStore(url) as store:
        return store.head(agent_id)


def test_the_page_as_shown_is_deleted(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        form = _delete_form(c.get("/agent?id=agent-001").text)
        assert form["head"] == str(_head(store_copy, "agent-001")) and len(form["mark"]) == 16
        done = c.post("/agent/delete", data=form)
        assert done.status_code == 200 and "was deleted" in done.text
        assert c.get("/agent?id=agent-001").status_code == 404


def test_a_write_between_the_page_and_the_post_deletes_nothing(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        form = _delete_form(c.get("/agent?id=agent-001").text)
        shown = _head(store_copy, "agent-001")  # what the page shows
        with SyncStateStore(store_copy) as store:  # another process writes meanwhile
            store.save("agent-001", {"task": "task 1", "late": "written after the page"})
        r = c.post("/agent/delete", data=form)
        assert r.status_code == 409, r.text[:600]
        text = unescape(r.text)
        assert "written since it was shown" in text and "nothing was deleted" in text
        assert f"head seq {shown + 1} now, the page showed {shown}" in text
        assert 'href="/agent?id=agent-001"' in r.text  # look again
        assert "Deleted</h1>" not in text
    with SyncStateStore(store_copy) as store:  # the write the page never showed is kept
        assert store.head("agent-001") == shown + 1
        assert store.load("agent-001").data["late"] == "written after the page"


def test_an_agent_deleted_and_made_again_to_the_same_head_is_not_deleted(
    store_copy: str,
) -> None:
    with SyncStateStore(store_copy) as store:
        store.save("x", {"n": 1})
        store.save("x", {"n": 2})
    with make_client(store_copy, allow_writes=True) as c:
        form = _delete_form(c.get("/agent?id=x").text)
        with SyncStateStore(store_copy) as store:  # deleted and written again, to seq 2
            assert store.delete("x")
            store.save("x", {"n": "new 1"})
            store.save("x", {"n": "new 2"})
        r = c.post("/agent/delete", data=form)
        assert r.status_code == 409, r.text[:600]
        assert form["head"] == "2"
        assert "deleted and made again since it was shown" in unescape(r.text)
    with SyncStateStore(store_copy) as store:
        assert store.load("x").data == {"n": "new 2"}


def test_a_form_without_the_head_shown_is_refused(store_copy: str) -> None:
    with make_client(store_copy, allow_writes=True) as c:
        form = _delete_form(c.get("/agent?id=agent-001").text)
        for missing in ("head", "mark"):
            old = {k: v for k, v in form.items() if k != missing}  # an older page's form
            r = c.post("/agent/delete", data=old)
            assert r.status_code == 400, r.text[:600]
            assert "does not say which head" in unescape(r.text)
        bad = c.post("/agent/delete", data={**form, "mark": "not-a-mark"})
        assert bad.status_code == 400
        assert c.get("/agent?id=agent-001").status_code == 200  # nothing deleted


async def test_the_live_view_gives_the_new_heads_mark_for_the_form() -> None:
    """The page following new events sends the head it shows now: each ``head`` event
    carries that head's mark, the one a page rendered at that head would have."""

    from statekeeper.store.delete_shown import head_identity, identity_mark

    async def never() -> bool:
        return False

    async with StateStore("memory://") as store:
        await store.save("a", {"n": 1})
        events = head_events(store, "a", 1, None, 0.0, never)
        while not (await events.__anext__()).startswith(b": idle"):
            pass
        await store.save("a", {"n": 2})
        chunk = (await events.__anext__()).decode()
        while not chunk.startswith("event: head"):
            chunk = (await events.__anext__()).decode()
        seq, _, mark = chunk.split("data: ", 1)[1].split()
        assert seq == "2" and mark == identity_mark(await head_identity(store, "a"))


def test_a_form_updated_to_the_live_head_deletes(store_copy: str) -> None:
    """What the page's script does with that event: the form at the new head deletes."""
    with make_client(store_copy, allow_writes=True) as c:
        form = _delete_form(c.get("/agent?id=agent-002").text)
        with SyncStateStore(store_copy) as store:
            store.save("agent-002", {"task": "task 2", "more": 1})

        from statekeeper.store.delete_shown import head_identity, identity_mark

        async def now() -> str:
            async with StateStore(store_copy) as store:
                return identity_mark(await head_identity(store, "agent-002"))

        followed = {**form, "head": str(int(form["head"]) + 1), "mark": asyncio.run(now())}
        assert c.post("/agent/delete", data=form).status_code == 409
        done = c.post("/agent/delete", data=followed)
        assert done.status_code == 200 and "was deleted" in done.text
