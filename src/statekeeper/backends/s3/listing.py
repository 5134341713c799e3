"""The agents listed: one listing of their objects (not one per agent), then one HEAD
of each agent's newest commit, concurrently."""

from __future__ import annotations

import asyncio
from typing import Any

from ...records import AgentInfo
from .engine import S3Engine
from .layout import _agent_of, _layout_of

__all__ = ["S3Listing"]


class S3Listing(S3Engine):
    """The agents listed (a part of :class:`~.backend.S3Backend`)."""

    def _agent_ids(self, after: str | None, limit: int) -> list[str]:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._root,
            "Delimiter": "/",
            "MaxKeys": max(1, min(limit, 1000)),
        }
        if after is not None:
            # '~' sorts after every hex digit and '/': skips all keys of ``after``
            kwargs["StartAfter"] = self._root + after.encode().hex() + "/~"
        ids: list[str] = []
        while len(ids) < limit:
            page = self._s3.list_objects_v2(**kwargs)
            for common in page.get("CommonPrefixes", ()):
                agent = _agent_of(common["Prefix"][len(self._root) : -1])
                if agent is not None:  # (None: another store's, nested in ours)
                    ids.append(agent)
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)
        return ids[:limit]

    def _info_sync(self, agent_id: str) -> AgentInfo | None:
        _, meta = self._tip(agent_id)
        if meta is None:
            return None
        return AgentInfo(
            agent_id, int(meta["last"]), float(meta["created"]), float(meta["updated"])
        )

    def _tips_listed(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[str, str | None]], bool]:
        """Up to ``limit`` agents after ``after``, each with the key of its newest live
        commit (None: it has none), read from ONE listing of their objects
        (ListObjectsV2 pages of 1,000 keys; an agent's keys are contiguous, its ``e/``
        ones first) instead of a listing per agent; and whether the listing ended."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root}
        if after is not None:
            kwargs["StartAfter"] = self._root + after.encode().hex() + "/~"
        out: list[tuple[str, str | None]] = []
        current: str | None = None
        tagged: list[tuple[str, str]] = []

        def close(hexid: str) -> None:
            agent = _agent_of(hexid)
            if agent is None:  # another store's objects, its prefix nested in ours
                return
            root = self._root + hexid + "/e/"
            commits = _layout_of(root, tagged).commits
            tip = root + self._seq_name(commits[-1][0]) if commits else None
            out.append((agent, tip))

        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                hexid, _, rest = obj["Key"][len(self._root) :].partition("/")
                if hexid != current:
                    if current is not None:
                        close(current)
                        if len(out) >= limit:
                            return out, False
                    current, tagged = hexid, []
                if rest.startswith("e/"):
                    tag = f"{obj.get('ETag', '')}@{obj.get('LastModified', '')}"
                    tagged.append((obj["Key"], tag))
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
            kwargs.pop("StartAfter", None)
        if current is not None:
            close(current)
        return out, True

    def _info_at(self, agent_id: str, tip: str) -> AgentInfo | None:
        """The agent's info from the metadata of its newest commit ``tip`` (one HEAD;
        the agent read again when that commit went meanwhile)."""
        meta = self._head_meta(tip)
        if meta is None:
            return self._info_sync(agent_id)
        return AgentInfo(
            agent_id, int(meta["last"]), float(meta["created"]), float(meta["updated"])
        )

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One listing of the agents' objects (not one per agent), then one HEAD of each
        agent's newest commit (its head and times are in its metadata), concurrently."""
        out: list[AgentInfo] = []
        cursor = after
        while len(out) < limit:
            want = limit - len(out)
            tips, ended = await self._run(self._tips_listed, cursor, want)
            infos = await asyncio.gather(
                *(self._run(self._info_at, a, tip) for a, tip in tips if tip is not None)
            )
            out.extend(info for info in infos if info is not None)
            if ended or not tips:
                break
            cursor = tips[-1][0]
        return out
