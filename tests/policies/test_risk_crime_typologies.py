"""Laundering, terrorist financing and sanctions-evasion typologies the pack reads whatever the field names:
crowdfunding and foreign fighters, human trafficking and labour exploitation, sanctioned places named in text,
export-control diversion, ownership by designated persons, duplicate and phantom trade documents, PEPs paid by
public contractors, correspondent and private banking red flags, structuring across branches, dormant accounts
woken remotely. Each with a benign look-alike; the mitigations that clear them (family support, the usual amount,
a PEP's due diligence done) are here too. Events written for these tests from the indicators the rules cite."""
from __future__ import annotations

from tests.policies.conftest import BLOCK, HIGH, LOW, MEDIUM, judge_at

judged = judge_at("2025-09-01T10:00:00Z")


def test_terrorist_financing_crowdfunding_and_foreign_fighters() -> None:
    assert judged("p2p_out", 1_200, payment_details="from our crowdfunding page for the brothers in Sham",
                  bene_city="Kilis") == HIGH
    assert judged("card_purchase", 380, case_notes_from_channel="closed savings account last week, one-way ticket "
                  "booked, buying tactical gear")[0] == "high"
    # look-alike: a registered charity's recurring grant to a UN implementing partner
    assert judged("wire_out", 60_000, obi="winter relief grant, UNHCR implementing partner", charity_registered=True,
                  same_partner_since="2019-01") == LOW


def test_human_trafficking_and_labour_exploitation() -> None:
    assert judged("card_auth", 89, hotel_stays_30d=17, escort_ads_30d=9, gift_card_purchases_30d=12) == HIGH
    assert judged("payroll_out", 3_100, employees_sharing_address=6, wages_withdrawn_by_one_person=True)[0] == "high"
    # look-alikes: a travelling salesman's hotel nights; a seasonal employer housing workers under a licence
    assert judged("card_auth", 189, hotel_nights_30d=14, merchant_descriptor="MARRIOTT") == LOW
    assert judged("payroll_out", 3_100, staff_accommodation=True, staffing_agency_licensed=True) == LOW


def test_sanctioned_places_in_payment_text_are_screened_not_blocked() -> None:
    assert judged("wire_out", 48_000, obi="spare parts for client plant in Bandar Abbas") == HIGH
    assert judged("wire_out", 48_000, bene_ctry="IR") == BLOCK  # the country itself: an embargo


def test_export_control_diversion() -> None:
    assert judged("lc_payment", 300_000, goods_desc="microcontrollers HS 854231", consignee_ctry="AM",
                  final_destination="Saint Petersburg, Russia") == BLOCK
    assert judged("lc_payment", 300_000, goods_desc="CNC machine tools", consignee_ctry="UAE",
                  consignee_incorporated="2024-11", end_user_statement="not provided") == HIGH
    # look-alike: the same hub with ordinary goods
    assert judged("lc_payment", 300_000, goods_desc="frozen shrimp", consignee_ctry="UAE",
                  relationship_with_buyer_years=9) == LOW


def test_ownership_by_a_designated_person_is_reviewed() -> None:
    assert judged("wire_out", 90_000, bene_owner="60% held by a holding controlled by a designated oligarch") == HIGH
    assert judged("wire_out", 90_000, bene_owner="listed company, free float") == LOW


def test_duplicate_and_phantom_trade_documents() -> None:
    assert judged("invoice_finance", 75_000, invoice_check="duplicate invoice: already financed elsewhere") == HIGH
    # FATF-Egmont (2021): a bill of lading the carrier does not know is an indicator to investigate, held for review
    assert judged("lc_presentation", 500_000, bl_verified_with_carrier=False, goods="steel coils") == HIGH
    assert judged("lc_presentation", 500_000, bl_verified_with_carrier=True, goods="steel coils",
                  docs_compliant=True) == LOW


def test_a_pep_paid_by_a_public_contractor() -> None:
    assert judged("wire_in", 80_000, pep=True, payment_details="advisory fee",
                  originator_note="won public tender from the ministry") == HIGH
    # look-alikes: due diligence completed; a former PEP out of office for years
    assert judged("wire_in", 80_000, pep=True, edd_approved=True, sow_documented="sale of family business") == LOW
    assert judged("wire_in", 8_000, pep="former mayor", left_office="2019-05") == LOW


def test_correspondent_and_private_banking_red_flags() -> None:
    assert judged("mt103_in", 700_000, respondent_type="shell bank") == BLOCK
    assert judged("mt103_in", 700_000, obi="payable through for downstream bank customers") == HIGH
    assert judged("mt103_in", 7_000, originator_info_complete=False) == MEDIUM
    assert judged("wire_out", 3_000_000, client_structure="discretionary trust over a private investment company",
                  hold_mail=True) == HIGH
    assert judged("wire_out", 3_000_000, client_structure="individual", standing_instruction_since="2017-01")[0] != "high"


def test_structuring_across_branches_and_dormant_accounts_woken_remotely() -> None:
    assert judged("cash_deposit", 8_900, branches_used_2d=3) == HIGH
    assert judged("transfer_out", 4_000, dormant=True, login_device_new=True) == MEDIUM
    # look-alike: a dormant account reactivated in branch with ID, with a documented inheritance
    assert judged("transfer_in", 40_000, dormant=True, reactivated_in_branch_with_id=True,
                  payment_details="inheritance share, probate on file") == LOW


def test_what_is_known_about_a_party_from_elsewhere() -> None:
    assert judged("wire_in", 20_000, cust_flags="314(a) match on originator") == HIGH
    assert judged("wire_in", 2_000, adverse_media_hit=True) == MEDIUM
    assert judged("wire_in", 2_000, prior_sar=True) == LOW  # weight, not a signal alone
    assert judged("wire_in", 2_000, prior_sar=True, adverse_media_hit=True) == MEDIUM  # a flag and a factor


def test_mitigations_phrased_generally() -> None:
    remit = {"bene_ctry": "NG"}
    assert judged("remittance", 300, **remit) == MEDIUM  # a grey-listed country alone: one red flag
    assert judged("remittance", 300, **remit, bene_relationship="sister", same_bene_months=26) == LOW
    assert judged("remittance", 300, **remit, payment_details="Unterhalt Schwester, monatlich") == LOW
    seasonal = {"customer_since": "2009-01", "avg_withdrawal_amount_12m": 21_000}
    assert judged("cash_withdrawal", 22_000, **seasonal) == LOW
    assert judged("cash_withdrawal", 22_000, customer_since="2009-01") == MEDIUM
