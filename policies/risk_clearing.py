"""Facts that only clear an alert: read from free text only when the text affirms them.

A mitigation's context (a documented purpose, a regulated counterparty, activity consistent with the
profile) lowers a rule's points, so reading it where the event does not say it hides risk: the field
`ubo_docs: "incomplete"` documents nothing, `payer_profile: "government road contractor"` describes a
payer and says nothing of fit. A risk flag may read a description as yes ("domestic PEP (mayor)"); a fact
only mitigations use needs a boolean, a yes word, or a passed outcome ("verified", "on file") with no
failed one (RiskRules.passed_words, failed_words): Wolfsberg and the EBA ML/TF Risk Factor Guidelines
(EBA/GL/2021/02) both ask that lower-risk factors be evidenced, not presumed.
"""
from __future__ import annotations

from policies.countries import words
from policies.risk_conditions import parse
from policies.risk_model import FactKind, RiskRules

_NEGATIONS = frozenset({"not", "no", "non", "never", "without", "nor"})
_CACHE: dict[int, tuple[RiskRules, frozenset[str]]] = {}


def clearing_facts(rules: RiskRules) -> frozenset[str]:
    """Flag facts that some mitigation's `when` names and no rule's `when` does (built once per policy object)."""
    hit = _CACHE.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]

    def named(conditions: tuple[str, ...]) -> set[str]:
        return {f for c in conditions for atom in parse(c) for f in atom.facts}

    by_rules = set().union(*(named(r.when) for r in rules.rules.values()))
    by_mitigations = set().union(*(named(m.when) for m in rules.mitigations.values()))
    got = frozenset(f for f in by_mitigations - by_rules
                    if f in rules.facts and rules.facts[f].kind is FactKind.FLAG)
    if len(_CACHE) > 32:
        _CACHE.clear()
    _CACHE[id(rules)] = (rules, got)
    return got


def affirms(rules: RiskRules, text: str) -> bool | None:
    """Whether free text affirms a clearing fact: False with a failed outcome word, True with a passed one not
    negated just before it, None (unread) otherwise."""
    said = words(text)
    joined = f" {' '.join(said)} "
    if any(f" {' '.join(words(w))} " in joined for w in rules.failed_words):
        return False
    for w in rules.passed_words:
        phrase = words(w)
        for i in range(len(said) - len(phrase) + 1):
            if said[i:i + len(phrase)] == phrase and not _NEGATIONS.intersection(said[max(0, i - 2):i]):
                return True
    return None
