"""Idempotency keys: looked up (the key object, or the newest commit's metadata),
listed, expired (the newest commit's overwritten with the expired mark) and renamed
(new before old)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from ...records import STEP_KEY_PREFIX, AppendResult, StreamChange
from ..base import check_expiry, validate_rename_guard
from .base import _INC
from .engine import S3Engine
from .layout import _EXPIRED, _foreign, _key_body, _key_range

__all__ = ["S3IdempotencyKeys"]


class S3IdempotencyKeys(S3Engine):
    """Idempotency keys (a part of :class:`~.backend.S3Backend`)."""

    def _lookup_sync(self, agent_id: str, key: str) -> AppendResult | None:
        root = self._agent_root(agent_id)
        key_hash = self._key_hash(key)
        found = self._get(root + "k/" + key_hash)
        if found is not None and found[0] == _EXPIRED:
            return None  # (the newest commit's key, expired)
        tip: tuple[list[int], dict[str, str] | None] | None = None
        if found is not None:  # (kept when a prune removed its events)
            a, b = _key_range(found[0])
            if _INC not in found[1]:  # (written before incarnations, or kept by a restore)
                return AppendResult(agent_id, a, b, duplicate=True)
            tip = self._tip(agent_id)
            if not _foreign(found[1], tip[1]):
                return AppendResult(agent_id, a, b, duplicate=True)
            # a late write of a deleted stream's append (as _append_sync tells it)
        commits, meta = tip if tip is not None else self._tip(agent_id)
        if meta is not None and meta.get("key") == key_hash:
            first = self._tip_first(commits, meta)
            return AppendResult(agent_id, first, int(meta["last"]), duplicate=True)
        return None

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        return await self._run(self._lookup_sync, agent_id, key)

    def _keys_sync(self, agent_id: str) -> list[tuple[str, int, int]]:
        root = self._agent_root(agent_id) + "k/"
        commits, meta = self._tip(agent_id)
        out: list[tuple[str, int, int]] = []
        expired = False
        for name in self._list(root):
            found = self._get(name)
            if found is None or _foreign(found[1], meta):  # (a deleted stream's late write)
                continue
            if found[0] == _EXPIRED:
                expired = expired or (meta is not None and name == root + meta.get("key", ""))
                continue
            first, last, raw = found[0].split(b":", 2)
            if raw:
                out.append((raw.decode(), int(first), int(last)))
        if meta is not None and meta.get("keyname") and not expired:
            name = unquote(meta["keyname"])
            if all(k != name for k, _, _ in out):
                out.append((name, self._tip_first(commits, meta), int(meta["last"])))
        return sorted(out, key=lambda k: k[1])

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        return await self._run(self._keys_sync, agent_id)

    def _expire_sync(self, agent_id: str, before: float, count_only: bool) -> int:
        """One agent's :meth:`expire_keys`: each key object's time read (a HEAD each),
        the old ones deleted but a durable step's (a GET of each old one reads its
        key), the newest commit's marked expired (see the module documentation); the
        marks of keys no longer the newest commit's deleted."""
        root = self._agent_root(agent_id) + "k/"
        _, meta = self._tip(agent_id)
        tip = root + meta["key"] if meta is not None and meta.get("key") else None
        old: list[str] = []
        marks: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root}
        while True:
            page = self._s3.list_objects_v2(**kwargs)
            for obj in page.get("Contents", ()):
                name = obj["Key"]
                meta_of = self._head_meta(name) or {}
                if meta_of.get("expired"):
                    if name != tip:
                        marks.append(name)
                    continue
                made = meta_of.get("created")
                stamp = float(made) if made else obj["LastModified"].timestamp()
                if stamp < before and not self._kept_key(name, tip, meta):
                    old.append(name)
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        if count_only:
            return len(old)
        for name in old:
            if name == tip:
                self._s3.put_object(
                    Bucket=self.bucket, Key=name, Body=_EXPIRED, Metadata={"expired": "1"}
                )
                self._drop_older_versions([name])  # (the expired record's bytes)
        self._delete_keys([name for name in old if name != tip] + marks)
        return len(old)

    def _kept_key(self, name: str, tip: str | None, meta: dict[str, str] | None) -> bool:
        """Whether the key object ``name`` is one ``expire_keys`` keeps: a durable
        step's record (its body names its key; a body written back without it, the
        newest commit's, is named by the commit), or one whose key is not known."""
        found = self._get(name)
        if found is None:
            return True  # (gone meanwhile: nothing to expire)
        key = found[0].split(b":", 2)[2].decode() if found[0].count(b":") >= 2 else ""
        if not key and name == tip and meta is not None:
            key = unquote(meta.get("keyname", ""))
        return not key or key.startswith(STEP_KEY_PREFIX)

    def _expire_all_sync(self, agent_id: str | None, before: float, count_only: bool) -> int:
        if agent_id is not None:
            return self._expire_sync(agent_id, before, count_only)
        total, after = 0, None
        while True:
            ids = self._agent_ids(after, 1000)
            for one in ids:
                total += self._expire_sync(one, before, count_only)
            if len(ids) < 1000:
                return total
            after = ids[-1]

    def _rename_keys_sync(self, agent_id: str, renames: list[tuple[str, str]]) -> int:
        """Each record's new key object written (only if absent) before its old one
        goes: a process killed in between leaves both, never neither. The old object of
        the newest commit's key is overwritten with the expired mark instead (the
        commit names that key: deleted, the next append would write it back)."""
        root = self._agent_root(agent_id) + "k/"
        commits, meta = self._tip(agent_id)
        tip = root + meta["key"] if meta is not None and meta.get("key") else None
        done = 0
        for old, new in renames:
            name = root + self._key_hash(old)
            found = self._get(name)
            made = {"created": meta.get("updated", "")} if meta is not None else {}
            if found is not None and found[0] != _EXPIRED:
                first, last = _key_range(found[0])
                made = {k: v for k, v in found[1].items() if k in ("created", _INC)}
            elif found is None and name == tip and meta is not None:
                first, last = self._tip_first(commits, meta), int(meta["last"])
            else:
                continue  # not stored (or expired)
            done += self._put_new(root + self._key_hash(new), _key_body(first, last, new), made)
            if name == tip:
                self._s3.put_object(
                    Bucket=self.bucket, Key=name, Body=_EXPIRED, Metadata={"expired": "1"}
                )
                self._drop_older_versions([name])  # (the record under its old name)
            else:
                self._delete_keys([name])
        return done

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Store records under another form of their key (see :meth:`_rename_keys_sync`:
        new before old, S3 having no transaction over several objects; a ``guard`` is
        refused: no ``guards_renames``)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        return await self._run(self._rename_keys_sync, agent_id, list(renames))

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Forget the idempotency records made before ``before``: per agent a listing
        of its key objects and a HEAD of each (S3 is the cold tier: a maintenance pass,
        not a hot path)."""
        before = check_expiry(agent_id, before)
        if not count_only:
            self._check_can_write()
        return await self._run(self._expire_all_sync, agent_id, before, count_only)
