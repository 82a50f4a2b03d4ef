"""A figure that replaces another (textspans/supersession.py): amending text, a correction, a table of current and
proposed limits. "now", "amended", "proposed" ask for the new figure; "before the change", "existing", "was" for
the old one; no marker for the figure in force. Without a model: the lead code offers."""
from __future__ import annotations

from gateway.domain.answer_plan import plan_answer
from gateway.domain.retrieval import DocumentIndex
from textspans.figures import find_figures
from textspans.supersession import NEW, OLD, column_version, version_asked, versions

AMENDING = (
    "THE DORMANT ACCOUNTS (AMENDMENT) REGULATIONS 2025\n"
    "3. Amendment of regulation 3 (meaning of dormant account)\n"
    "In regulation 3(1) of the principal Regulations-\n"
    '(a) in sub-paragraph (a) (current and savings accounts), for "15 years" substitute "10 years";\n'
    '(b) in sub-paragraph (b) (fixed-term deposits), for "15 years after the maturity date" substitute "7 years '
    'after the maturity date".\n'
    "4. Amendment of regulation 5 (notice to customers)\n"
    'In paragraph (3) (period the customer has to respond to a dormancy notice), for "30 days" substitute "45 days".\n')


def test_an_amendment_answers_now_with_the_new_figure_and_before_with_the_old() -> None:
    index = DocumentIndex(AMENDING)
    p = plan_answer(index, "Under the amended rules, after how long without activity does a savings account become "
                           "dormant?")
    assert p.leads == ("10 years",), p.reason
    p = plan_answer(index, "How long will customers now have to respond to a dormancy notice?")
    assert p.leads == ("45 days",), p.reason
    p = plan_answer(index, "How long did customers have to respond to a dormancy notice before the amendment?")
    assert p.leads == ("30 days",), p.reason
    # no marker: the figure in force, the amendment's
    p = plan_answer(index, "After how long does a fixed-term deposit become dormant?")
    assert p.leads[0] == "7 years", p.reason


def test_a_table_of_current_and_proposed_limits_answers_by_the_side_asked() -> None:
    index = DocumentIndex(
        "3. CARD LIMITS - CURRENT AND PROPOSED\n"
        "Limit                                  | Current    | Proposed\n"
        "Standard card, monthly credit limit    | 5,000      | 7,500\n"
        "Senior manager card, monthly limit     | 15,000     | 20,000\n"
        "ATM cash withdrawal, per card/month    | 500        | 250\n")
    p = plan_answer(index, "What is the existing monthly limit on a senior manager card, before the change?")
    assert p.found and p.leads == ("15,000",), p.reason
    p = plan_answer(index, "What monthly limit is proposed for a senior manager card?")
    assert p.leads == ("20,000",), p.reason
    # beside a proposal, "current" and no marker ask for the limit in force
    assert plan_answer(index, "What is the current monthly limit on a standard card?").leads == ("5,000",)


def test_each_way_of_writing_a_change_pairs_the_old_figure_with_the_new() -> None:
    for sentence, old, new in [
        ("The notice period is increased from 30 days to 45 days.", "30 days", "45 days"),
        ("The fee of GBP 25 is deleted and replaced with GBP 10.", "GBP 25", "GBP 10"),
        ("Replace 3 months with 6 months in paragraph (2).", "3 months", "6 months"),
        ("The cap is now 8% (previously 6%) of the pot value.", "6%", "8%"),
        ("Correction to my earlier email: the fee should read GBP 50, not GBP 75.", "GBP 75", "GBP 50"),
        ('Clause 7 is amended by deleting "USD 40,000" and replacing it with "USD 55,000".', "USD 40,000", "USD 55,000"),
        ("Paragraph 3 is amended by omitting 14 days and inserting 21 days.", "14 days", "21 days"),
        # a corrigendum's formula, with no word of correction in its own sentence
        ('In item 4, the minimum fee "EUR 60" shall read "EUR 85".', "EUR 60", "EUR 85"),
        # the new figure's unit between it and the old one
        ("(a) Band C pontoon rate in Clause 2.1: GBP 509/m (previously GBP 498/m);", "GBP 498", "GBP 509"),
        ("The margin is 2.4% p.a., up from 2.1%.", "2.1%", "2.4%"),
        # a few words between, saying what the new figure is of, the old one in brackets
        ("- Zone 2 drop-off multiple: 1.5x standard (previously 2.0x).", "2.0x", "1.5x"),
        ("Notice is given three months before the change takes effect (previously six weeks).", "six weeks",
         "three months"),
    ]:
        figures = find_figures(sentence)
        marks = dict(zip((f.text for f in figures), versions(sentence, figures), strict=True))
        assert marks[old] == OLD and marks[new] == NEW, (sentence, marks)
    # a range is no change, nor a column naming a segment
    figures = find_figures("The term may run from 1 to 5 years.")
    assert versions("The term may run from 1 to 5 years.", figures) == ["", ""]
    # a bracket that is no change
    sentence = "The fee is 2% of the loan (see Clause 3)."
    assert versions(sentence, find_figures(sentence)) == ["", ""]
    assert column_version("Proposed") == NEW and column_version("Current limit") == OLD
    assert column_version("New customers") == ""


def test_current_asks_for_the_old_figure_only_beside_a_proposal() -> None:
    assert version_asked("What was the dormancy period for current accounts before this amendment?") == OLD
    assert version_asked("What is the dormancy period for current accounts?") == ""
    assert version_asked("What is the current limit?", proposal=True) == OLD
    assert version_asked("What is the current limit?") == ""


def test_a_proposal_the_final_rule_replaced_and_a_figure_kept_until_a_change_yield_to_the_new_one() -> None:
    index = DocumentIndex(
        "Drawdown rules: feedback and final rules\n"
        "3.3 We proposed that providers send a sustainability warning when a customer's planned annual withdrawals "
        "exceed 6% of the pot value. Respondents said this was too low. The final rule sets the trigger at 8% of the "
        "pot value, measured at the date of the instruction.\n"
        "PS 5.5 Authorised push payment fraud\n"
        "PS 5.5.1 A PSP must reimburse a consumer who is a victim of authorised push payment (APP) fraud up to a "
        "maximum of €85,000 per claim.\n"
        "PS 5.5.2 Until 28 February 2027 the maximum APP reimbursement per claim remains €415,000.\n")
    p = plan_answer(index, "At what planned withdrawal rate must a sustainability warning now be sent?")
    assert p.leads == ("8%",), p.reason
    p = plan_answer(index, "What withdrawal rate did the consultation paper propose for the sustainability warning?")
    assert p.leads == ("6%",), p.reason
    p = plan_answer(index, "Once the amendments are in force, what is the ceiling on APP fraud reimbursement per claim?")
    assert p.leads == ("€85,000",), p.reason


def test_a_change_named_by_its_instrument_or_its_date_marks_the_side_asked() -> None:
    """"before the side letter", "prior to Tariff Notice 7/2027", "before the May 2027 variation" ask for the old
    figure; "following the corrigendum", "under the 2028 changes", "since 1 March 2028" for the new one; an event
    that is no change ("before the loan is drawn") marks no side."""
    for q in ("Before the side letter, what escalation rate applied?",
              "Prior to Tariff Notice 7/2027, what did a berth cost per metre?",
              "What advance rate applied to export invoices before the May 2027 variation?",
              "Before the 2027 fee changes, what was the transfer fee?",
              "What was the storage rate before 1 January 2028?"):
        assert version_asked(q) == OLD, q
    for q in ("Following the corrigendum, how many days does the review take?",
              "Under the 2028 changes, how many counterparties are required?",
              "Since 1 March 2028, what is the cash-out fee?",
              "After the board's resolution, what is the equity target?"):
        assert version_asked(q) == NEW, q
    for q in ("What fee is payable before the loan is drawn?", "What amount must accompany the application?",
              "How much notice must be given before the meeting?"):
        assert version_asked(q) == "", q
    index = DocumentIndex("4.2 The reserve rate escalates by 3.5% each year.\n"
                          "Side Letter No. 1: with effect from 1 January 2028, the annual escalation in paragraph 4.2 "
                          "is reduced from 3.5% to 3.0%.\n")
    assert plan_answer(index, "Before the side letter, what annual escalation applied?").leads == ("3.5%",)


def test_the_line_that_changes_the_plans_figure_is_an_option_however_it_ranks() -> None:
    """A table's cell the plan reads ("GBP 498" for band C on a pontoon) and the amendment that replaces it far
    below, in words the question does not use: the new figure is among the answer chooser's options."""
    from gateway.domain.answer_chooser import options

    rows = "\n".join(f"{b}  {lo} - {hi} m  GBP {p}/m  GBP {w}/m" for b, lo, hi, p, w in [
        ("A", "0.00", "7.99", 412, 468), ("B", "8.00", "10.99", 455, 517), ("C", "11.00", "13.99", 498, 566)])
    text = ("2. BERTH FEES\n2.1 Annual fees per metre of LOA:\nBand  LOA  Pontoon  Walk-ashore\n" + rows + "\n"
            + "\n".join(f"3.{i} Electricity is metered and charged at cost plus {i}% handling." for i in range(1, 9))
            + "\n7. AMENDMENT NOTICE\nWith effect from 1 April 2026 the following replace the figures above:\n"
            "(a) Band C in Clause 2.1: GBP 509/m (previously GBP 498/m);\n(b) the handling charge in 3.1: 2%.")
    index = DocumentIndex(text)
    question = "I keep a 12.5 m boat on a pontoon berth. What annual fee per metre applies from April 2026?"
    plan = plan_answer(index, question)
    assert plan.leads == ("GBP 498",)
    assert "GBP 509" in [o.text for o in options(index, question, plan)]
