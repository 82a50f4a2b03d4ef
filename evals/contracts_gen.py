"""A seeded generator of labelled synthetic contracts: the extraction evaluation set.

`generate(n, seed)` returns `n` contracts, each with its text and the ground truth of the fields
of `examples/contract_schema.json`. The same (n, seed) always gives the same contracts. The text
varies what trips extraction up in real contracts: six contract types under several titles,
three layouts (numbered clauses, a table of terms, recitals), amounts written several ways
(`USD 1,250,000.00`, `EUR 2.5 million`, `$250,000`, words with figures), dates in several formats,
counterparties with different legal forms and roles, the order of the parties, auto-renewal stated
positively and negatively, and distractors: a second amount, a governing-law clause, a notice
period and our own company's name.
"""
from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

COMPANY = "Finserve Holdings Ltd."
TYPES: dict[str, tuple[str, ...]] = {
    "loan": ("LOAN AGREEMENT", "TERM LOAN FACILITY AGREEMENT", "CREDIT AGREEMENT"),
    "lease": ("EQUIPMENT LEASE AGREEMENT", "LEASE AGREEMENT", "MASTER LEASE"),
    "swap": ("INTEREST RATE SWAP CONFIRMATION", "CROSS CURRENCY SWAP CONFIRMATION", "SWAP TRANSACTION CONFIRMATION"),
    "service": ("MASTER SERVICES AGREEMENT", "CONSULTING SERVICES AGREEMENT", "SERVICE LEVEL AGREEMENT"),
    "supply": ("SUPPLY AGREEMENT", "PURCHASE AND SUPPLY CONTRACT", "GOODS SUPPLY AGREEMENT"),
    "nda": ("MUTUAL NON-DISCLOSURE AGREEMENT", "CONFIDENTIALITY AGREEMENT", "NON-DISCLOSURE AGREEMENT"),
}
ROLES = {"loan": ("Lender", "Borrower"), "lease": ("Lessor", "Lessee"), "swap": ("Dealer", "Counterparty"),
         "service": ("Provider", "Client"), "supply": ("Supplier", "Buyer"), "nda": ("Discloser", "Recipient")}
VALUE_PHRASES = {  # what the notional is called in each type
    "loan": ("the principal amount of the Loan is", "the Lender makes available a facility of"),
    "lease": ("the total rent payable over the term is", "aggregate lease payments amount to"),
    "swap": ("the Notional Amount is", "the notional amount of the Transaction is"),
    "service": ("the total fees payable are", "the contract value is"),
    "supply": ("the total purchase price is", "the aggregate value of goods to be supplied is"),
    "nda": ("liquidated damages for any breach are fixed at", "the parties agree a breach penalty of"),
}
FIRST = ("Kestrel", "Harbor Point", "Northwind", "Bluewater", "Aldgate", "Meridian", "Silverline", "Orchard",
         "Granite", "Lumen", "Cobalt", "Redwood", "Tamarind", "Vantage", "Beacon", "Stonebridge", "Juniper",
         "Falcon", "Helios", "Ironwood", "Lakeside", "Marlow", "Pinecrest", "Quayside")
SECOND = ("Energy", "Capital", "Logistics", "Systems", "Bank", "Industries", "Partners", "Leasing", "Trading",
          "Technologies", "Foods", "Holdings", "Advisors", "Materials", "Finance", "Manufacturing")
FORMS = ("Ltd.", "LLC", "plc", "GmbH", "S.A.", "AG", "Inc.", "B.V.", "S.p.A.", "SAS", "Limited", "Corporation")
CURRENCIES = {"USD": ("$", "US dollars"), "EUR": ("€", "euros"), "GBP": ("£", "pounds sterling"),
              "JPY": ("¥", "Japanese yen"), "CHF": ("CHF ", "Swiss francs")}
LAWS = ("England and Wales", "the State of New York", "Switzerland", "Germany", "Japan", "Ireland")
ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


@dataclass(frozen=True)
class Contract:
    id: str
    text: str
    truth: dict[str, Any]  # the fields of examples/contract_schema.json, as the answer should hold them

    def as_item(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "truth": self.truth}


def number_words(n: int) -> str:
    """English words for 0 <= n < 1000 (e.g. 'two hundred fifty')."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


def _amount(rng: random.Random, currency: str) -> float:
    if currency == "JPY":
        return float(rng.choice((5, 12, 25, 40, 150, 320)) * 1_000_000)
    scale = rng.choice((1_000, 10_000, 100_000))
    return float(rng.choice((25, 40, 75, 120, 250, 480, 950, 1250)) * scale)


def format_amount(rng: random.Random, value: float, currency: str) -> str:
    """One of several ways to write `value` in `currency`; each parses back to `value`."""
    symbol, words = CURRENCIES[currency]
    whole = int(value)
    styles = [f"{currency} {whole:,}", f"{currency} {value:,.2f}", f"{symbol}{whole:,}", f"{whole:,} {words}"]
    if whole % 100_000 == 0 and whole >= 1_000_000:
        styles.append(f"{currency} {whole / 1_000_000:g} million")
    if whole % 1_000 == 0 and whole // 1_000 < 1000:
        styles.append(f"{number_words(whole // 1_000)} thousand {words} ({currency} {whole:,})")
    return rng.choice(styles)


def format_date(rng: random.Random, d: dt.date) -> str:
    day = d.day
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return rng.choice([
        d.isoformat(), f"{day} {d:%B %Y}", f"{d:%B} {day}, {d.year}", f"{day:02d}.{d.month:02d}.{d.year}",
        f"the {day}{suffix} day of {d:%B}, {d.year}",
    ])


def format_term(rng: random.Random, months: int) -> str:
    styles = [f"{months} months", f"{number_words(months)} ({months}) months"]
    if months % 12 == 0:
        years = months // 12
        styles += [f"{years} year{'s' if years > 1 else ''}", f"{number_words(years)} ({years}) years"]
    return rng.choice(styles)


def renewal_clause(rng: random.Random, renews: bool) -> str:
    yes = ("It renews automatically for successive periods of equal length unless either party gives "
           "{n} days' notice.", "This Agreement shall automatically renew for further twelve-month periods "
           "unless terminated on {n} days' written notice.", "Upon expiry the term is extended automatically "
           "(auto-renewal) unless a party objects at least {n} days before expiry.")
    no = ("It does not renew automatically; any extension requires a written amendment.",
          "This Agreement shall not renew automatically and expires at the end of the term.",
          "No automatic renewal applies: the parties may agree an extension in writing at least {n} days "
          "before expiry.")
    return rng.choice(yes if renews else no).format(n=rng.choice((30, 60, 90)))


def counterparty(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(SECOND)} {rng.choice(FORMS)}"


def _distractor(rng: random.Random, currency: str, kind: str) -> str:
    fee = format_amount(rng, float(rng.choice((500, 1_000, 2_500, 5_000))), currency)
    return rng.choice((
        f"Late payments bear a fee of {fee} per occurrence.",
        f"A security deposit of {fee} is payable on signature.",
        f"Each party shall maintain insurance of at least {fee}.",
        f"Administrative costs of up to {fee} are borne by the {ROLES[kind][1]}.",
    ))


def generate(n: int, seed: int = 0) -> list[Contract]:
    """`n` labelled contracts; item i depends only on (seed, i), so a prefix of a larger set is the smaller set."""
    return [_contract(random.Random(f"{seed}:{i}"), f"G-{seed}-{i:04d}") for i in range(n)]


def _contract(rng: random.Random, cid: str) -> Contract:
    kind = rng.choice(sorted(TYPES))
    currency = rng.choice(sorted(CURRENCIES))
    value = _amount(rng, currency)
    months = rng.choice((6, 12, 18, 24, 36, 48, 60))
    start = dt.date(2023, 1, 1) + dt.timedelta(days=rng.randrange(0, 3 * 365))
    renews = rng.random() < 0.5
    party = counterparty(rng)
    truth = {"counterparty": party, "contract_type": kind, "notional": value, "currency": currency,
             "term_months": months, "effective_date": start.isoformat(), "auto_renew": renews}
    facts = _Facts(kind, rng.choice(TYPES[kind]), party, format_amount(rng, value, currency),
                   format_date(rng, start), format_term(rng, months), renewal_clause(rng, renews),
                   _distractor(rng, currency, kind), rng.choice(LAWS), rng.choice(VALUE_PHRASES[kind]))
    layout = rng.choice((_numbered, _table, _recitals))
    return Contract(cid, layout(rng, facts), truth)


@dataclass(frozen=True)
class _Facts:
    kind: str
    title: str
    party: str
    amount: str
    date: str
    term: str
    renewal: str
    distractor: str
    law: str
    value_phrase: str

    def parties(self, rng: random.Random) -> str:
        ours, theirs = ROLES[self.kind] if rng.random() < 0.5 else ROLES[self.kind][::-1]
        pairs = [f"{COMPANY} (the \"{ours}\")", f"{self.party} (the \"{theirs}\")"]
        rng.shuffle(pairs)
        return f"{pairs[0]} and {pairs[1]}"


def _numbered(rng: random.Random, f: _Facts) -> str:
    title = f.title.title()
    clauses = [
        f"1. Amount. Under this Agreement {f.value_phrase} {f.amount}.",
        f"2. Term. This Agreement has a term of {f.term} from the Effective Date. {f.renewal}",
        f"3. Costs. {f.distractor}",
        f"4. Governing law. This Agreement is governed by the laws of {f.law}.",
    ]
    return (f"{f.title}\n\nThis {title} (the \"Agreement\") is entered into as of {f.date} (the \"Effective "
            f"Date\") between {f.parties(rng)}.\n" + "\n".join(clauses) + "\n")


def _table(rng: random.Random, f: _Facts) -> str:
    rows = [("Parties", f.parties(rng)), ("Effective date", f.date), ("Contract value", f.amount),
            ("Term", f.term), ("Governing law", f.law)]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (f"{f.title}\n\nKEY TERMS\n| Item | Detail |\n|---|---|\n{table}\n\n"
            f"Renewal. {f.renewal}\nOther terms. {f.distractor} Notices go to {COMPANY}, Legal Department.\n")


def _recitals(rng: random.Random, f: _Facts) -> str:
    return (f"{f.title}\n\nTHIS AGREEMENT is made on {f.date} BETWEEN {f.parties(rng)}.\n\n"
            f"WHEREAS the parties wish to record the terms on which they will deal with each other;\n"
            f"WHEREAS {COMPANY} has approved this transaction under its internal policies;\n\n"
            f"NOW IT IS AGREED as follows: {f.value_phrase} {f.amount}. The Agreement runs for {f.term} "
            f"from the date above. {f.renewal} {f.distractor} This Agreement is governed by the laws of "
            f"{f.law}.\n")
