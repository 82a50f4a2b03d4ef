"""Vendor risk scores on one scale (the derived fact `risk_score`, 0-1).

Fraud and AML engines, device and IP intelligence send their verdict as a number or a word under names such
as `fraud_score`, `device_risk`, `aml_score`, `ip_risk_score`, `mule_probability`, `risk_rating`: an attribute
whose name holds one of `score_words` and one of `score_subject_words`, and none of `score_excluded_words` (a
customer's KYC rating or a country's is a profile factor, a match or liveness score is higher-is-better: a
check, policies/risk_checks.py). Its value is put on 0-1 by its scale: 0-1 as it is, up to 100 a percentage,
up to 1,000 per mille (also when the name says 1000 or 999, "score_0_1000": 85 is 0.085); a word through
`rating_values` (low, medium, high, critical). The event's risk_score is the highest of its scores.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from policies.risk_model import RiskRules
from policies.risk_text import number, singular

_PER_MILLE_NAME = re.compile(r"(?<!\d)(1000|999)(?!\d)")


def vendor_score(rules: RiskRules, words: frozenset[str], raw_name: str, value: object) -> float | None:
    """The 0-1 score one attribute carries, or None when it is no vendor risk score."""
    if not (words & _folded(rules.score_words) and words & _folded(rules.score_subject_words)):
        return None
    if words & _folded(rules.score_excluded_words):
        return None
    if isinstance(value, str):
        rated = rating(rules.rating_values, value)
        if rated is not None:
            return rated
    n = number(value)
    if n is None or n < 0:
        return None
    if _PER_MILLE_NAME.search(raw_name):
        return min(n / 1000, 1.0)
    if n <= 1:
        return n
    return n / 100 if n <= 100 else (n / 1000 if n <= 1000 else None)


def rating(values: Mapping[str, float], text: str) -> float | None:
    """A rating word's place on the scale ("High", "very high", "LOW RISK"); the longest rating the text names."""
    said = " ".join(re.findall(r"[a-z]+", text.casefold()))
    found = [(len(k), v) for k, v in values.items() if re.search(rf"(?<![a-z]){re.escape(k)}(?![a-z])", said)]
    return max(found)[1] if found else None


def _folded(words: Sequence[str]) -> frozenset[str]:
    return frozenset(singular(w.casefold()) for w in words)
