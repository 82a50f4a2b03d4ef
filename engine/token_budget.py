"""One step's token budget with per-class reserved shares.

While a class has work this step, `reserve` tokens of the step are kept for it: any other
class may only take what leaves every other working class's unmet reserve intact. So for
each class c:  allowance(c) = remaining - sum over working d != c of max(0, reserve_d - used_d),
which is never below c's own unmet reserve as long as the reserves sum to at most the total.
Reserves of classes without work are not held back at all; reserves a class could not use
(its requests were blocked) are released by `drop_reserves` for a second pass.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping


class StepTokenBudget:
    def __init__(self, total: int, reserves: Mapping[str, int], classes_with_work: Iterable[str]):
        working = set(classes_with_work)
        self.total = total
        self.remaining = total
        self._used: Counter[str] = Counter()
        self._reserves = {c: r for c, r in reserves.items() if r > 0 and c in working}

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
