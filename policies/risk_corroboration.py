"""An event that states its own records agree: the `records_agree` fact.

An analyst clears a large or unusual amount when the bank's own records explain it: the till takings reconcile
with the deposit, the invoice matches the bill of lading, the payout matches the schedule, the filings are
consistent with the turnover. Systems state that check as a flag named by its verb or adjective:
{"pos_takings_reconciled": "yes"}, {"invoice_matches_bl": true}, {"vat_filings_consistent": true},
{"recon_status": "matched"}. The reader holds when an attribute's name has an agreement word (AGREEMENT_WORDS)
and its value affirms it (true, or a text that says only yes or "match": policies/risk_text.py `flag`), unless

- the name is about a screening list (RiskRules.listed_words: list, sdn, screening, hit) or about who a person
  is (RiskRules.identifier_words, a name, a face): a "list_match" is an alert to clear, a "payee_name_match" a
  check of the payee (RiskRules.checks), neither an explanation of the amount;
- the name is negated ("not_reconciled") or says the opposite ("mismatch", "inconsistent" are other words).

A number under such a name (match_score 0.82, pos_sales_match_pct 98) is a degree, not a statement, and is not read.
Wolfsberg and the EBA ML/TF Risk Factor Guidelines (EBA/GL/2021/02) ask that a lower-risk factor be evidenced: a
stated reconciliation is the evidence, a description is not.
"""
from __future__ import annotations

from collections.abc import Iterable

from policies.risk_derived import Named
from policies.risk_text import NEGATIONS, flag

# A name with one of these words states that two records were compared and agree.
AGREEMENT_WORDS = frozenset({"match", "matched", "matching", "reconciled", "reconcile", "reconciliation",
                             "consistent", "agree", "agreed", "agrees", "corroborated", "tally", "tallies"})
_PERSON_WORDS = frozenset({"name", "face", "biometric", "selfie", "identity", "id"})


def records_agree(listed: frozenset[str], identifiers: frozenset[str], named: Iterable[Named]) -> bool:
    """Whether an attribute states that the event agrees with the customer's own records (module docstring)."""
    other = listed | identifiers | _PERSON_WORDS | NEGATIONS
    for n in named:
        if not n.meaning & AGREEMENT_WORDS or n.meaning & other:
            continue
        if n.value is True or isinstance(n.value, str) and flag(n.value) is True:
            return True
    return False
