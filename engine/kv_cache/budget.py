"""Per-class KV block accounting: how many blocks each workload class holds, against its shares.

A class *holds* a block when at least one of its live requests has it in its block table, or
it holds a lease on it (leases.py); a prefix block shared by ten questions on one document counts
once for that class.
Shares are fractions of the pool, turned into block counts once:
  min_blocks  guaranteed: other classes never preempt the class below it, and a
              non-preemptible class never borrows another class's unused guarantee
              (it could not be taken back);
  max_blocks  the class never holds more.
Classes missing from the table have no guarantee, no cap and are preemptible.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ClassShare:
    min_blocks: int
    max_blocks: int
    preemptible: bool

    @classmethod
    def of(cls, num_blocks: int, min_share: float, max_share: float, preemptible: bool) -> ClassShare:
        return cls(int(min_share * num_blocks), int(max_share * num_blocks), preemptible)


class ClassKVBudget:
    def __init__(self, num_blocks: int, shares: Mapping[str, ClassShare] | None = None):
        self.num_blocks = num_blocks
        self._shares = dict(shares or {})
        self._unlimited = ClassShare(0, num_blocks, True)
        self._refs: defaultdict[str, Counter[int]] = defaultdict(Counter)  # class -> block_id -> tables

    def share(self, name: str) -> ClassShare:
        return self._shares.get(name, self._unlimited)

    def held(self, name: str) -> int:
        return len(self._refs[name])

    def holds(self, name: str, block_id: int) -> bool:
        return block_id in self._refs[name]

    def acquire(self, name: str, block_ids: Iterable[int]) -> None:
        self._refs[name].update(block_ids)

    def release(self, name: str, block_ids: Iterable[int]) -> None:
        refs = self._refs[name]
        for b in block_ids:
            refs[b] -= 1
            if refs[b] <= 0:
                del refs[b]

    # ---- questions the manager and scheduler ask ----------------------------------------
    def over_max(self, name: str, extra_blocks: int) -> int:
        """Blocks the class would hold beyond its cap after taking `extra_blocks` more (0: within it). A cap
        as large as the pool is no cap: the pool itself is what runs out."""
        cap = self.share(name).max_blocks
        return 0 if cap >= self.num_blocks else max(0, self.held(name) + extra_blocks - cap)

    def below_min(self, name: str) -> bool:
        return self.held(name) < self.share(name).min_blocks

    def keeps_min_without(self, name: str, blocks: int) -> bool:
        """True if the class still holds its guaranteed share after giving up `blocks`."""
        return self.held(name) - blocks >= self.share(name).min_blocks

    def unmet_min_of_others(self, name: str) -> int:
        """Blocks other classes are guaranteed but do not hold yet."""
        return sum(max(0, s.min_blocks - self.held(c)) for c, s in self._shares.items() if c != name)

    def max_usable(self, name: str) -> int:
        """The most blocks one request of the class could ever get (admission's 'never fits' test)."""
        share = self.share(name)
        cap = min(share.max_blocks, self.num_blocks)
        if not share.preemptible:
            others = sum(s.min_blocks for c, s in self._shares.items() if c != name)
            cap = min(cap, self.num_blocks - others)
        return cap
