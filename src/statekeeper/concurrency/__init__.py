"""Many workers, one agent: optimistic locking, leases with fencing, merges, durable steps.

==========================  ===========================================================
module                      concern
==========================  ===========================================================
:mod:`.retry`               read-modify-write with retries on ``ConflictError``
:mod:`.leases`              exclusive leases whose fencing tokens the storage checks
:mod:`.clock`               hybrid logical clock (the clock of last-write-wins)
:mod:`.vclock`              vector clocks: ordered or concurrent?
:mod:`.crdt`                counters, LWW register/map, OR-set, append-only list
:mod:`.merge`               strategies that reconcile concurrent versions
:mod:`.steps`               durable steps: record a result once, replay it after a crash
:mod:`.sync`                the blocking faces of steps, leases, update and merge, over a
                            ``SyncStateStore`` (:mod:`.sync_leases`: the leases)
==========================  ===========================================================

The guide is ``docs/concurrency.md``.
"""

from .clock import HybridClock, Timestamp
from .crdt import CRDT, AppendOnlyList, GCounter, LWWMap, LWWRegister, ORSet, PNCounter, is_crdt
from .crdt import from_json as crdt_from_json
from .leases import Lease, LeaseManager, default_holder
from .merge import (
    MISSING,
    CRDTs,
    Custom,
    LastWriteWins,
    Manual,
    MergeContext,
    Merged,
    MergePolicies,
    Merger,
    Nested,
    Strategy,
    Unresolved,
    Version,
    merge_into,
)
from .retry import Backoff, Updated, retry_on_conflict, update, update_agent
from .steps import StepHandle, StepRecord, Steps
from .sync import SyncLease, SyncLeaseManager, SyncSteps
from .vclock import Ordering, VectorClock

__all__ = [
    "CRDT",
    "MISSING",
    "AppendOnlyList",
    "Backoff",
    "CRDTs",
    "Custom",
    "GCounter",
    "HybridClock",
    "LWWMap",
    "LWWRegister",
    "LastWriteWins",
    "Lease",
    "LeaseManager",
    "Manual",
    "MergeContext",
    "MergePolicies",
    "Merged",
    "Merger",
    "Nested",
    "ORSet",
    "Ordering",
    "PNCounter",
    "StepHandle",
    "StepRecord",
    "Steps",
    "Strategy",
    "SyncLease",
    "SyncLeaseManager",
    "SyncSteps",
    "Timestamp",
    "Unresolved",
    "Updated",
    "VectorClock",
    "Version",
    "crdt_from_json",
    "default_holder",
    "is_crdt",
    "merge_into",
    "retry_on_conflict",
    "update",
    "update_agent",
]
