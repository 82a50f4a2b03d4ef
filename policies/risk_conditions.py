"""A rule's conditions (RiskRule.when / unless): parsed once per text, evaluated against an event's facts.

    condition := atom ( "|" atom )*          any atom holds
    atom      := ["not "] fact [ OP number ]  OP: >= > <= < == !=
               | N " of " fact ( "," fact )*  at least N of the facts hold (indicators of one typology)

A bare `fact` holds when the fact is true (a flag), non-empty (a country set) or non-zero; a comparison
holds only for a number that was read, so a fact the event does not carry never satisfies one (an
unknown account age is not "new"). `not` applies to true/false facts. `2 of hotel_stays, adult_ads,
prepaid_cards` holds when any two of those facts hold: a typology's indicators, none decisive alone.
"""
from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_ATOM = re.compile(r"^(not\s+)?([a-z][a-z0-9_]*)\s*(?:(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?))?$")
_COUNT = re.compile(r"^(\d+)\s+of\s+([a-z][a-z0-9_]*(?:\s*,\s*[a-z][a-z0-9_]*)+)$")


@dataclass(frozen=True)
class Atom:
    fact: str  # the fact (for a count of facts: the first of `among`)
    negate: bool
    op: str | None  # None: the fact's truth
    value: float
    among: tuple[str, ...] = ()  # "N of a, b, c": the facts counted (value is N)

    @property
    def facts(self) -> tuple[str, ...]:
        return self.among or (self.fact,)


Condition = tuple[Atom, ...]  # a parsed condition: any of its atoms holding makes it hold


class ConditionError(ValueError):
    """A condition that does not parse; the message says why."""


@functools.cache
def parse(text: str) -> Condition:
    """The atoms of one condition (any of them holding makes it hold). Raises ConditionError."""
    atoms = []
    for part in text.split("|"):
        counted = _COUNT.match(part.strip())
        if counted is not None:
            among = tuple(f.strip() for f in counted.group(2).split(","))
            n = int(counted.group(1))
            if not 1 <= n <= len(among) or len(set(among)) != len(among):
                raise ConditionError(f"{part.strip()!r}: N of distinct facts, N between 1 and their number")
            atoms.append(Atom(among[0], False, None, float(n), among))
            continue
        m = _ATOM.match(part.strip())
        if m is None:
            raise ConditionError(f"cannot read {part.strip()!r}: write `fact`, `not fact`, `fact >= 3` or "
                                 "`2 of a, b, c`, joined by | for any of them")
        negate, fact, op, value = bool(m.group(1)), m.group(2), m.group(3), m.group(4)
        if negate and op is not None:
            raise ConditionError(f"{part.strip()!r}: `not` applies to a true/false fact; invert the comparison")
        atoms.append(Atom(fact, negate, op, float(value) if value is not None else 0.0))
    return tuple(atoms)


def holds(condition: Condition, facts: Mapping[str, object]) -> bool:
    return any(_atom(a, facts.get(a.fact), facts) for a in condition)


def _truth(value: object) -> bool:
    return bool(value) and value is not None


def _atom(atom: Atom, value: object, facts: Mapping[str, object]) -> bool:
    if atom.among:
        return sum(_truth(facts.get(f)) for f in atom.among) >= atom.value
    if atom.op is None:
        truth = bool(value) and value is not None
        return not truth if atom.negate else truth
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return _OPS[atom.op](float(value), atom.value)
