"""One step's token budget with per-class reserved shares.

Each class's reserve this step is min(its share of the step, the tokens it could use this
step); any other class may only take what leaves every other class's unmet reserve intact:
  allowance(c) = remaining - sum over d != c of max(0, reserve_d - used_d),
which is never below c's own unmet reserve as long as the reserves sum to at most the total.
A class without work reserves nothing; reserves a class could not use after all (its requests
were blocked on slots or blocks) are released by `drop_reserves` for a second pass.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


class StepTokenBudget:
    def __init__(self, total: int, reserves: Mapping[str, int], demand: Mapping[str, int]):
        self.total = total
        self.remaining = total
        self._used: Counter[str] = Counter()
        self._reserves = {c: min(r, demand.get(c, 0)) for c, r in reserves.items() if min(r, demand.get(c, 0)) > 0}

    def allowance(self, cls: str, *, ignore_reserves: bool = False) -> int:
        if ignore_reserves:
            return self.remaining
        held_back = sum(max(0, r - self._used[d]) for d, r in self._reserves.items() if d != cls)
        return max(0, self.remaining - held_back)

    def take(self, cls: str, n: int) -> None:
        self._used[cls] += n
        self.remaining -= n

    def refund(self, cls: str, n: int) -> None:
        self._used[cls] -= n
        self.remaining += n

    @property
    def has_reserves(self) -> bool:
        return bool(self._reserves)

    def drop_reserves(self) -> None:
        self._reserves = {}


def class_reserves(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Token reserves per class; scaled down if a policy's shares add up to more than the step."""
    scale = min(1.0, 1.0 / max(sum(shares.values()), 1e-9))
    return {c: int(s * scale * total) for c, s in shares.items()}
