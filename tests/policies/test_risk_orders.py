"""Screening hits and orders on the funds as vendors and authorities write them: a name score under a hit or a
screening in the vendor's language, a court's or prosecutor's freezing order. Events written for these tests."""
from __future__ import annotations

import pytest

from policies.risk_readers import off
from tests.policies.test_risk_readers import facts, judged_action


def test_a_name_score_under_a_hit_or_a_screening_is_its_match_score() -> None:
    """French and Portuguese screening vendors: {"hit": {"score_nom": 0.97}}, {"screening": {"nom": 0.96}}; a name
    score elsewhere (a payee check) is no list match."""
    hit = {"hit.liste": "UN CAR regime (fictional entry)", "hit.score_nom": 0.97, "hit.correspondance_adresse": True}
    assert facts(hit, "sanctions_screening_hit")["list_match"] == pytest.approx(0.97)
    assert judged_action(hit, "sanctions_screening_hit", amount=54_000_000, currency="XAF") == "block"
    screened = {"screening.liste": "consolidated", "screening.nom": 0.96, "screening.dateNaissance": "match"}
    assert facts(screened, "remittance_send")["list_match"] == pytest.approx(0.96)
    assert facts({"hit.nome": 0.93, "hit.lista": "ONU"}, "triagem")["list_match"] == pytest.approx(0.93)
    assert "list_match" not in facts({"payee.nom": 0.97, "batch": "salaires"}, "virement")


def test_the_score_of_a_screening_or_a_hit_itself_is_its_match_score() -> None:
    """{"screening": {"score": 100}}: what a list screening scores is the name; a risk score under a screening is
    not a match score, and a plain score outside a screening is none either."""
    exact = {"screening.lista": "UN consolidated list (fictional entry)", "screening.tipo": "alias exacto",
             "screening.score": 100}
    assert facts(exact, "outgoing_swift")["list_match"] == pytest.approx(1.0)
    assert judged_action(exact, "outgoing_swift", amount=2_100_000, currency="USD") == "block"
    assert facts({"hit.confidence": 0.84, "hit.list": "OFAC SDN"}, "wire_out")["list_match"] == pytest.approx(0.84)
    assert "list_match" not in facts({"screening.risk_score": 100, "screening.list": "PEP"}, "wire_out")
    assert "list_match" not in facts({"score": 100, "channel": "branch"}, "wire_out")
    with off(["screening_own_score"]):  # the reader judged apart from the set it was written for (evals/risk_lowo.py)
        assert "list_match" not in facts(exact, "outgoing_swift")



def test_a_freeze_or_seizure_order_on_the_funds_blocks_in_any_language() -> None:
    """A prosecutor's freezing order (French "gel des avoirs"), a seizure order or a restraint order: the funds may
    not leave (FATF R.4 provisional measures). A news item about seized goods is no order on the funds."""
    order = {"requisition.objet": "gel des avoirs - enquete trafic d'ivoire", "ordres_en_cours": 1}
    assert facts(order, "judicial_requisition")["legal_freeze"] is True
    assert judged_action(order, "virement", amount=19_500_000, currency="XAF") == "block"
    assert judged_action({"restraint_order": True}, "wire_out", amount=40_000, currency="GBP") == "block"
    media = {"adverse_media": "article local: saisie de tortues a l'aeroport", "permis": "aucun"}
    assert facts(media, "purchase")["legal_freeze"] is False
