"""Controls whose outcome upstream systems report (RiskRules.checks), read with their polarity.

A document check, a payee name check, 3-D Secure, a call-back or a liveness score is written in many ways:
`doc_template_check: "MRZ checksum fail"`, `cop_result: "no match"`, `callback_done: false`,
`billing_postcode_match: false`, `end_user_certificate: "missing"`, `liveness_score: 0.31`,
`contract_on_file: true`, `decline_reasons: "N7 CVV2 mismatch x3"`. An attribute whose name names a check's
subject (its words, in any order, translations applied) is read by the outcome its name and value say
together:

- a true/false value: under a name saying failure (`*_mismatch`, `*_missing`, `duplicate_*`) true fails; under
  any other name (`*_verified`, `*_on_file`, or the bare subject: `callback: false`) false fails, true passes;
- a number: a count under a name saying failure (`cvv_failures: 3`) fails when positive, one under a name
  saying success (`invoices_attached: 3`) passes; a check with `pass_at` reads a 0-1 (or 0-100) score, below
  it fails;
- text: a phrase of `failed_words` fails ("fail", "no match", "unsigned"), one of `passed_words` passes
  ("verified", "on file"), a passed phrase or the subject right after a negation fails ("not verified", "no
  supporting documents"); failure wins when both are said ("provided, unsigned"); text with no outcome passes
  under a name saying success (`sca_passed: "biometric"`) or a check whose `stated_passes` is set (a
  source of funds described in words; a bare figure is no outcome); null fails a check whose `null_fails` is set (`sof_evidence: null`).

A name that names no subject is searched in its text value: a subject beside an outcome phrase (within
OUTCOME_REACH words) gives that check the outcome ("CVV2 mismatch"). Screening attributes (a name with one of
`listed_words`) are no checks: a hit there is bad news, not a failed control.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from policies.risk_model import RiskRules
from policies.risk_text import NEGATION_REACH, NEGATIONS, flag, number, text_words

OUTCOME_REACH = 3  # a subject and an outcome this close in a text belong together ("CVV2 mismatch x3")
FAILED, UNKNOWN, PASSED = -1, 0, 1
_SCORE_WORDS = frozenset({"score", "confidence", "similarity", "probability", "level", "rating"})


@dataclass(frozen=True)
class Check:
    name: str
    subjects: tuple[tuple[str, ...], ...]  # each subject's words
    failed: str  # the flag fact a failure makes true
    passed: str  # the flag fact a pass makes true ("" none)
    pass_at: float  # 0: scores not read
    stated_passes: bool
    null_fails: bool


@dataclass(frozen=True)
class Checks:
    checks: tuple[Check, ...]
    failed: tuple[tuple[str, ...], ...]  # outcome phrases, longest first
    passed: tuple[tuple[str, ...], ...]
    subjects: tuple[tuple[str, ...], ...]  # every check's subjects: one denied fails ("no supporting documents")

    def outcomes(self, name: Sequence[str], value: object, text: Sequence[str]) -> Iterator[str]:
        """The flag facts one attribute makes true: `name` its English words in order, `value` as sent, `text` the
        English words of a text value (empty otherwise)."""
        if not self.checks:
            return
        named = self._named(set(name))
        if value is None:  # a document or registration given as null was not provided
            named = [c for c in named if c.null_fails]
            value = False
        if not named:
            yield from self._in_text(text)
            return
        said = self.polarity(name, ())
        got = self._outcome(named, said, value, text, bool(_SCORE_WORDS.intersection(name)))
        for check in named:
            fact = check.failed if got == FAILED else check.passed if got == PASSED else ""
            if fact:
                yield fact

    def _named(self, name: set[str]) -> list[Check]:
        """The checks whose subject the name names, only those with the longest such subject (id_document_check is
        the identity check, not any document's)."""
        best, found = 0, []
        for check in self.checks:
            size = max((len(s) for s in check.subjects if set(s) <= name), default=0)
            if size and size > best:
                best, found = size, [check]
            elif size and size == best:
                found.append(check)
        return found

    def _outcome(self, named: list[Check], said: int, value: object, tokens: Sequence[str], scored: bool) -> int:
        """One attribute's outcome for the checks its name names (module docstring)."""
        gate = max((c.pass_at for c in named), default=0.0) if scored else 0.0
        if isinstance(value, bool):
            return (FAILED if value else UNKNOWN) if said == FAILED else (PASSED if value else FAILED)
        if isinstance(value, int | float):
            if said == FAILED:
                return FAILED if value > 0 else UNKNOWN
            if gate and (score := _unit_score(float(value))) is not None:
                return PASSED if score >= gate else FAILED
            return PASSED if said == PASSED and value > 0 else UNKNOWN
        if not isinstance(value, str) or not value.strip():
            return UNKNOWN
        told = self.polarity(tokens, self.subjects)
        if told != UNKNOWN:
            return told
        truth = flag(value)
        if truth is not None and said != FAILED:
            return PASSED if truth else FAILED
        if truth is not None:
            return FAILED if truth else UNKNOWN
        score = number(value)
        if gate and score is not None and (scaled := _unit_score(score)) is not None:
            return PASSED if scaled >= gate else FAILED
        if said == PASSED or any(c.stated_passes for c in named) and any(t.isalpha() for t in tokens):
            return PASSED  # a stated source of funds passes; a bare figure ("invoice_vs_market": "+310%") says nothing
        return UNKNOWN

    def polarity(self, tokens: Sequence[str], subjects: Sequence[tuple[str, ...]]) -> int:
        """FAILED when the words say a failure (or deny a pass or a subject), else PASSED when they say a pass."""
        seen = UNKNOWN
        for i in range(len(tokens)):
            denied = bool(NEGATIONS.intersection(tokens[max(0, i - NEGATION_REACH):i]))
            if _starts_any(tokens, i, self.failed):
                return FAILED
            if _starts_any(tokens, i, self.passed):
                if denied:
                    return FAILED
                seen = PASSED
            elif denied and _starts_any(tokens, i, subjects):
                return FAILED
        return seen

    def _in_text(self, tokens: Sequence[str]) -> Iterator[str]:
        """Checks named inside a text beside their outcome ("N7 CVV2 mismatch x3")."""
        for check in self.checks:
            for i in range(len(tokens)):
                subject = next((s for s in check.subjects if tuple(tokens[i:i + len(s)]) == s), None)
                if subject is None:
                    continue
                near = tokens[max(0, i - OUTCOME_REACH):i + len(subject) + OUTCOME_REACH]
                got = self.polarity(near, ())
                fact = check.failed if got == FAILED else check.passed if got == PASSED else ""
                if fact:
                    yield fact
                    break


def _starts_any(tokens: Sequence[str], i: int, phrases: Sequence[tuple[str, ...]]) -> bool:
    return any(tuple(tokens[i:i + len(p)]) == p for p in phrases)


def _unit_score(value: float) -> float | None:
    """A score on 0-1, or 0-100 read as a percentage; None outside both."""
    if 0 <= value <= 1:
        return value
    return value / 100 if 1 < value <= 100 else None


_COMPILED: dict[int, tuple[RiskRules, Checks]] = {}


def compiled(rules: RiskRules) -> Checks:
    """The checks of `rules`, their subjects and outcome phrases as words (built once per policy object)."""
    hit = _COMPILED.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]

    def phrases(texts: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
        return tuple(sorted({text_words(t) for t in texts if text_words(t)}, key=len, reverse=True))

    checks = tuple(Check(n, phrases(c.subjects), c.failed, c.passed, c.pass_at, c.stated_passes, c.null_fails)
                   for n, c in sorted(rules.checks.items()))
    built = Checks(checks, phrases(rules.failed_words), phrases(rules.passed_words),
                   tuple(s for c in checks for s in c.subjects))
    if len(_COMPILED) > 32:
        _COMPILED.clear()
    _COMPILED[id(rules)] = (rules, built)
    return built
