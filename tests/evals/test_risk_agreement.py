"""evals/risk_agreement.py: typology names go to one family, neighbours come from the other writers only, and the
agreement counts what it says."""
from __future__ import annotations

from typing import Any

from evals.risk_agreement import agreement, among_marked, canonical, consensus, marks, typology_neighbours


def _row(action: str, typology: str, facts: tuple[str, ...] = (), log_usd: float = 3.0,
         words: dict[str, float] | None = None) -> dict[str, Any]:
    return {"action": action, "typology": canonical(typology), "facts": frozenset(facts), "log_usd": log_usd,
            "words": words or {"v:cash": 1.0}}


def test_typology_names_as_writers_spell_them_share_a_family() -> None:
    assert canonical("structuring") == canonical("smurfing") == ("structuring", "suspicious")
    assert canonical("Structuring (benign look-alike)") == ("structuring", "benign")
    assert canonical("tbml_over_invoicing")[0] == canonical("trade-based ml: third-party payment")[0] == "trade"  # type: ignore[index]
    assert canonical("crypto_onoff_ramp") == ("crypto", "suspicious")
    assert canonical("bec payment to known mule") == ("bec", "suspicious")  # the earlier family wins
    assert canonical("remittance (ordinary)") == ("ordinary", "benign")
    assert canonical("insider_fraud") == ("other", "suspicious")
    assert canonical("") is None


def test_consensus_is_the_majority_and_a_tie_goes_to_the_more_severe() -> None:
    assert consensus(["approve", "approve", "review"]) == "approve"
    assert consensus(["approve", "review"]) == "review"
    assert consensus(["review", "block"]) == "block"


def test_neighbours_share_the_family_and_variant_nearest_by_facts_then_amount() -> None:
    me = _row("review", "structuring", ("cash", "near_threshold"), 4.0)
    far = _row("approve", "structuring", ("cash", "near_threshold"), 6.5)
    near = _row("block", "structuring", ("cash", "near_threshold"), 4.2)
    other_facts = _row("approve", "smurfing", ("cash",), 4.0)
    benign = _row("approve", "structuring_lookalike", ("cash", "near_threshold"), 4.0)
    card = _row("block", "card_testing", ("cash", "near_threshold"), 4.0)
    got = typology_neighbours(me, [far, other_facts, benign, card, near], 3, True)
    assert got == [near, far, other_facts]
    assert benign in typology_neighbours(me, [benign, card], 3, False)


def test_agreement_judges_each_writer_by_the_others_only() -> None:
    a = [_row("approve", "structuring_lookalike"), _row("review", "structuring")]
    b = [_row("approve", "structuring (benign)"), _row("block", "smurfing")]
    c = [_row("approve", "structuring look-alike (benign)"), _row("block", "structuring")]
    report = agreement({"a": a, "b": b, "c": c}, k=2)
    # a's review meets two blocks; b's block meets a review and a block (tie: block); the approvals all agree
    assert report["sets"]["a"]["typology"] == {"events": 2, "agreement": 0.5, "pairwise": 0.5}
    assert report["sets"]["b"]["typology"] == {"events": 2, "agreement": 1.0, "pairwise": 0.75}
    assert report["marked_writers"]["confusion"] == {"approve->approve": 3, "block->block": 2, "review->block": 1}


def test_a_writer_who_names_approvals_as_the_typology_is_not_marked() -> None:
    assert marks([_row("approve", "structuring_lookalike"), _row("block", "structuring")])
    assert not marks([_row("approve", "structuring"), _row("block", "structuring")])
    assert among_marked({"x": [_row("approve", "structuring")]}, 3) == {"sets": {}, "confusion": {}, "mean": None}
