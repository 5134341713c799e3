"""Witness files: commitments to every stream, kept *outside* the store.

A chain and an authenticated head detect records that are removed, reordered,
replayed, forged or copied — but not a rollback of the *whole* store to an older
copy (an old backup restored over the current file is internally consistent). A
witness closes that gap: :func:`export_witness` writes, for every agent, the head seq
and a digest of the chain up to it; :func:`check_witness`, later, verifies that each
stream still holds exactly what was witnessed (it may have grown since). A stream
that is shorter, different, or gone is reported.

With a key, digests are HMACs under the keyring's witness key, and the file itself is
sealed with one, so neither can be forged or edited without the key; without a key
they are SHA-256 (they detect a rollback, not a forger who also edits the witness).
Keep witness files where whoever can write the store cannot (another machine, an
append-only bucket, a ticket, a printed digest).

File format (JSON)::

    {"statekeeper_witness": 1, "exported_at": "2025-01-31T12:00:00Z",
     "streams": [{"agent_id": "a", "seq": 12, "key_id": "k2", "digest": "<hex>"}, …],
     "store_digest": "<hex of SHA-256 over the streams>",
     "seal": {"key_id": "k2", "mac": "<hex>"}}

**In a namespace**: exported from a store opened in one (``StateStore(url,
namespace="acme")``, CLI ``--namespace acme``), the file holds the streams of that
namespace and below, under their stored (full) ids, and names the namespace
(``"namespace": "acme"``); checked through a store opened in a namespace, only the
witnessed streams inside it are checked (a whole-store witness can be checked one
namespace at a time), and problems name the ids relative to it.

**As a principal** (``StateStore(url, principal=..., policy=...)``, CLI ``--as``): only
the witnessed streams the principal may read are checked; the others, like those
outside the namespace, are counted in :attr:`WitnessReport.out_of_scope`, never named
nor refused one by one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AgentForgotten, KeyNotFound, StatekeeperError
from .witness_file import VERSION, canonical, load_witness, write_atomically
from .witness_store import another_store, differs, identify, parse_store

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["WitnessProblem", "WitnessReport", "check_witness", "export_witness", "load_witness"]


@dataclass(frozen=True, slots=True)
class WitnessProblem:
    """A stream that no longer holds what the witness saw."""

    agent_id: str
    seq: int | None
    reason: str


@dataclass(slots=True)
class WitnessReport:
    """What :func:`check_witness` found."""

    checked: int = 0
    grown: int = 0
    new_agents: int = 0
    problems: list[WitnessProblem] = field(default_factory=list)
    #: witnessed streams this store does not see (outside its namespace, or that its
    #: principal may not read): not checked, and never named
    out_of_scope: int = 0

    @property
    def ok(self) -> bool:
        """True when every witnessed stream still holds what was witnessed."""
        return not self.problems


def _namespace(store: StateStore) -> str:
    namespace = getattr(store, "namespace", "")
    return namespace if isinstance(namespace, str) else ""


async def export_witness(
    store: StateStore,
    path: str | os.PathLike[str] | None = None,
    *,
    on_agent: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Commit to every stream of ``store`` (each verified on the way); write the witness
    to ``path`` (atomically) when given, and return it. An agent ``forget``
    crypto-shredded is passed over (nothing of it opens to commit to), as every
    store-wide job passes over it: its stored id is listed in ``forgotten``."""
    from ..store.namespaced import stored_id  # on use: the store imports this module

    streams: list[dict[str, Any]] = []
    forgotten: list[str] = []
    async for info in store.iter_agents():
        try:
            d = await store.digest(info.agent_id)
        except AgentForgotten:
            forgotten.append(stored_id(store, info.agent_id))
            continue
        full = stored_id(store, d.agent_id)  # the file names stored ids, in any namespace
        streams.append({"agent_id": full, "seq": d.seq, "key_id": d.key_id, "digest": d.digest})
        if on_agent is not None:
            on_agent(info.agent_id)
    data = canonical(streams)
    key_id, mac = store.codec.witness_seal(data)
    doc = {
        "statekeeper_witness": VERSION,
        "exported_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "backend": store.backend.name,
        "agents": len(streams),
        "streams": streams,
        "store_digest": hashlib.sha256(data).hexdigest(),
        "seal": {"key_id": key_id, "mac": mac},
    }
    namespace = _namespace(store)
    if namespace:
        doc["namespace"] = namespace
    ident = await identify(store.backend)  # whose: a check on another store says so
    if ident is not None:
        doc["store"] = ident
    if forgotten:
        doc["forgotten"] = forgotten
    if path is not None:
        write_atomically(Path(path), json.dumps(doc, indent=1) + "\n")
    return doc


async def check_witness(
    store: StateStore,
    witness: dict[str, Any] | str | os.PathLike[str],
    *,
    on_agent: Callable[[str], Any] | None = None,
) -> WitnessReport:
    """Check that every stream in ``witness`` still holds what it committed to."""
    from ..store.governed import governance_of
    from ..store.store import StreamDigest

    doc = witness if isinstance(witness, dict) else load_witness(witness)
    report = WitnessReport()
    streams = doc["streams"]
    seal = doc.get("seal") or {}
    if not isinstance(seal, dict):  # (edited: no key, no mac; was an AttributeError)
        seal = {}
    try:
        sealed = store.codec.check_witness_seal(
            canonical(streams), seal.get("key_id"), str(seal.get("mac", ""))
        )
    except KeyNotFound as exc:
        report.problems.append(WitnessProblem("*", None, _retired("the witness file", exc)))
        return report
    except StatekeeperError as exc:
        report.problems.append(WitnessProblem("*", None, f"witness file seal: {exc}"))
        return report
    if not sealed:
        report.problems.append(
            WitnessProblem("*", None, "the witness file was altered (its seal does not match)")
        )
        return report
    try:  # the store the file names (a file written before it did names none)
        filed = parse_store(doc.get("store"))
    except ValueError as exc:
        filed = None
        report.problems.append(WitnessProblem("*", None, f"the witness file is damaged: {exc}"))
    ours = await identify(store.backend) if filed is not None else None
    if filed is not None and ours is not None and differs(filed, ours):
        report.problems.append(WitnessProblem("*", None, another_store(filed, ours)))
    seen: set[str] = set()
    gov = governance_of(store)
    namespace = _namespace(store)
    prefix = namespace + "/" if namespace else ""
    for entry in streams:
        if int(entry["seq"]) < 1:
            continue  # a deletion an automatic witness saw (see highwater)
        stored = str(entry["agent_id"])
        if not stored.startswith(prefix) or (gov is not None and not gov.can_read(stored)):
            # outside the namespace this store is opened in, or another tenant's: not
            # checked here (nor refused one by one: a count, no id, no audit entry each)
            report.out_of_scope += 1
            continue
        agent_id = stored[len(prefix) :]  # as the store names it
        seen.add(agent_id)
        report.checked += 1
        expected = StreamDigest(agent_id, int(entry["seq"]), entry.get("key_id"), entry["digest"])
        try:
            problem = await store.check_digest(expected)
        except KeyNotFound as exc:
            problem = _retired("its digest", exc)
        except StatekeeperError as exc:
            problem = str(exc)
        if problem is not None:
            report.problems.append(WitnessProblem(agent_id, expected.seq, problem))
        elif await store.backend.head(stored) > expected.seq:
            report.grown += 1
        if on_agent is not None:
            on_agent(agent_id)
    async for info in store.iter_agents():
        if info.agent_id not in seen:
            report.new_agents += 1
    return report


def _retired(what: str, exc: KeyNotFound) -> str:
    """What a witness sealed (or a digest made) under a key the keyring lacks says: not
    damage, and not the store's key being wrong: a key retired since the export."""
    if exc.no_keyring:
        return str(exc)
    return (
        f"{what} was made with key {exc.key_id!r}, which is not in the keyring (retired "
        "since the witness was exported?): add that key to check it, and export a new "
        "witness after every key rotation"
    )
