"""Streams the cold-load and replay tests build and then damage: a chat whose every
save appends one message, and the edits of its SQLite file (a flipped payload byte, a
deleted event) that a load must refuse."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper import StateStore

MESSAGES = [{"role": "user", "content": f"message {i} " + "words " * 20} for i in range(60)]


def chat_url(tmp_path: Path, name: str) -> str:
    """A SQLite store ``name`` in ``tmp_path`` (no fsync: nothing here is about crashes)."""
    return f"sqlite:///{tmp_path / name}?synchronous=OFF"


async def save_chat(url: str, n: int, snapshot_every: int) -> None:
    """Agent ``chat``: ``n`` saves, the i-th holding the first i MESSAGES."""
    async with StateStore(url, snapshot_every=snapshot_every, witness=False) as store:
        for i in range(1, n + 1):
            await store.save("chat", {"messages": MESSAGES[:i]})


def flip_payload_byte(db: Path, seq: int, from_end: int = 3) -> None:
    """One bit of the stored payload of event ``seq`` flipped, ``from_end`` bytes from
    its end (past the envelope's header: the checksum must catch it)."""
    with closing(sqlite3.connect(db)) as conn:
        payload = conn.execute("SELECT payload FROM sk_events WHERE seq = ?", (seq,)).fetchone()[0]
        i = len(payload) - from_end
        bad = payload[:i] + bytes([payload[i] ^ 1]) + payload[i + 1 :]
        conn.execute("UPDATE sk_events SET payload = ? WHERE seq = ?", (bad, seq))
        conn.commit()


def delete_event(db: Path, seq: int, *, drop_trigger: bool = False) -> None:
    """Event ``seq`` deleted (``drop_trigger``: first the trigger that forbids it)."""
    with closing(sqlite3.connect(db)) as conn:
        if drop_trigger:
            conn.execute("DROP TRIGGER IF EXISTS sk_events_no_delete")
        conn.execute("DELETE FROM sk_events WHERE seq = ?", (seq,))
        conn.commit()
