"""Leases on cached KV blocks: a class keeps a finished request's prompt blocks for a while.

A request with `lease_s > 0` (a document question) leases its registered prefix blocks when it
finishes, until `now + lease_s`; a later request on the same blocks extends the lease. While the
lease holds, an unreferenced block is pinned in the pool (never evicted for other work) and counts
against the leasing class's KV share. An expired lease makes the block an ordinary cached block.
The owning class may give up its own leases when it needs the room, the soonest to expire first
and, within one lease, the deepest block first, so what stays is still a usable prefix.
This table only keeps the leases; KVCacheManager pins blocks and charges the class budget.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    workload_class: str  # the class whose KV share the block counts against
    until: float  # the manager's clock (monotonic seconds)
    depth: int  # index in the leasing request's block table: deeper blocks are given up first


class LeaseTable:
    def __init__(self) -> None:
        self._leases: dict[int, Lease] = {}  # block_id -> its lease
        self._expiry: list[tuple[float, int]] = []  # heap of (until, block_id); stale entries skipped

    def __len__(self) -> int:
        return len(self._leases)

    def get(self, block_id: int) -> Lease | None:
        return self._leases.get(block_id)

    def grant(self, block_id: int, lease: Lease) -> None:
        self._leases[block_id] = lease
        heapq.heappush(self._expiry, (lease.until, block_id))
        if len(self._expiry) > 4 * len(self._leases) + 1024:  # renewals leave stale entries: compact
            self._expiry = [(le.until, b) for b, le in self._leases.items()]
            heapq.heapify(self._expiry)

    def all(self) -> list[Lease]:
        return list(self._leases.values())

    def drop(self, block_id: int) -> Lease | None:
        return self._leases.pop(block_id, None)

    def expired(self, now: float) -> list[int]:
        """Block ids whose lease ended at or before `now` (still in the table: the caller drops them)."""
        out = []
        while self._expiry and self._expiry[0][0] <= now:
            until, block_id = heapq.heappop(self._expiry)
            lease = self._leases.get(block_id)
            if lease is not None and lease.until == until:  # else extended or dropped since
                out.append(block_id)
        return out

    def of_class(self, workload_class: str) -> list[int]:
        """The class's leased blocks in the order it gives them up: soonest to expire, then deepest."""
        mine = [(lease.until, -lease.depth, b) for b, lease in self._leases.items()
                if lease.workload_class == workload_class]
        return [b for _, _, b in sorted(mine)]
