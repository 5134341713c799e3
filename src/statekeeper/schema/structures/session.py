"""``Session``: who the agent talks to, where, since when, their preferences, a TTL."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Session"]


class Session(BaseModel):
    """A user's session with an agent. ``ttl`` (seconds) is how long it lives after
    ``last_seen``; None: it does not expire.

    >>> s = Session(user_id="u-1", channel="web", started_at=100.0, last_seen=100.0, ttl=60)
    >>> s.expires_at, s.expired(now=159.0), s.expired(now=161.0)
    (160.0, False, True)
    >>> s.touch(now=150.0); s.expires_at
    210.0
    """

    model_config = ConfigDict(extra="forbid")

    user_id: str
    channel: str = "default"
    started_at: float = Field(default_factory=time.time)
    last_seen: float = Field(default_factory=time.time)
    preferences: dict[str, Any] = Field(default_factory=dict)
    ttl: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _times(self) -> Session:
        if self.last_seen < self.started_at:
            raise ValueError("last_seen is before started_at")
        return self

    def touch(self, now: float | None = None) -> None:
        """Record activity (moves ``last_seen``, and so the expiry, never back: after a
        clock stepped back, a touch keeps the expiry an earlier touch promised)."""
        now = time.time() if now is None else now
        self.last_seen = max(now, self.last_seen, self.started_at)

    @property
    def expires_at(self) -> float | None:
        """When the session expires (seconds since the epoch), None if never."""
        return None if self.ttl is None else self.last_seen + self.ttl

    def expired(self, now: float | None = None) -> bool:
        """True once ``ttl`` seconds passed since ``last_seen``."""
        expires = self.expires_at
        return expires is not None and (time.time() if now is None else now) >= expires
