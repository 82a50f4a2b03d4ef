"""Legal-entity names in a contract, found by general code, and our own names recognised in any spelling.

A counterparty is a span of the contract: a run of capitalised words (or an all-caps run), which
may hold `&`, `-` and particles such as "of" or "de", and which either ends in a legal form of any
jurisdiction (ASA, AB, SA, S.A., Oy, SE, S.r.l., KGaA, Pty Ltd, GmbH & Co. KG, p.l.c. ...), names a
bank ("Bank of Valletta", "Harbor Point Bank"), or stands where contracts put a party: after
"between" or the "and" that follows it, before a role definition (`("Supplier")`, `(the "Lender")`,
`, a company incorporated ...`) or after a role label (`Lender: ...`). Names in a party position
come first; a name inside a longer one ("Energy GmbH" in "Kestrel Energy GmbH") is dropped.

Our own names are compared without case, punctuation or legal form ("FINSERVE HOLDINGS LTD" is
"Finserve Holdings Ltd."), and a name that begins with the distinctive first word of one of ours
("Finserve Group Services Limited") is an affiliate: ours too.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Legal forms, longest first (tokens as written; matched case-sensitively so "SA" is not "sa").
LEGAL_FORMS = (
    "GmbH & Co. KGaA", "GmbH & Co. KG", "AG & Co. KGaA", "AG & Co. KG", "S.A.B. de C.V.", "S.A. de C.V.",
    "Sp. z o.o.", "S.à r.l.", "S.a r.l.", "S.à.r.l.", "Pty. Ltd.", "Pty Ltd.", "Pty Ltd", "Pty. Limited",
    "Pty Limited", "Pte. Ltd.", "Pte Ltd.", "Pte Ltd", "Co., Ltd.", "Co. Ltd.", "Sdn. Bhd.", "Sdn Bhd",
    "Private Limited", "Public Limited Company", "Limited Liability Company", "L.L.C.", "S.p.A.", "S.r.l.",
    "S.A.S.", "S.A.", "S.L.U.", "S.L.", "S.C.A.", "S.E.", "N.V.", "B.V.", "A/S", "K.K.", "L.P.", "LLLP", "p.l.c.",
    "a.s.", "s.r.o.", "d.o.o.", "Kft.", "Zrt.", "Nyrt.", "Ltda.", "S/A", "GmbH", "gGmbH", "mbH", "KGaA", "AG",
    "SE", "SA", "AB", "ASA", "AS", "Oyj", "Oy", "ApS", "KG", "OHG", "UG", "SARL", "SAS", "SpA", "Srl", "BV",
    "NV", "Ltd.", "Ltd", "Limited", "LLC", "LLP", "LP", "plc", "PLC", "Inc.", "Inc", "Incorporated", "Corp.",
    "Corp", "Corporation", "Company", "Co.", "Bhd", "PJSC", "JSC", "OOO", "GIE", "SCA", "SCS", "PTE", "LTD",
    "LIMITED", "INC.", "INC", "CORP.", "CORPORATION", "COMPANY", "GMBH",
)
# Words that end an organisation's name without being a legal form.
INSTITUTION_HEADS = ("Bank", "Bancorp", "Banque", "Banca", "Banco", "Sparkasse", "Landesbank", "Building Society",
                     "Credit Union", "Trust Company", "Partners", "Associates", "Group", "Holdings",
                     "BANK", "PARTNERS", "GROUP", "HOLDINGS")
_PARTICLES = ("of", "de", "du", "des", "la", "le", "van", "der", "den", "von", "di", "da", "del", "do", "dos",
              "y", "e", "und", "et")
# Capitalised words that begin a sentence or a clause rather than a name.
_LEADING_NOISE = {"between", "and", "with", "by", "from", "to", "this", "that", "these", "the", "dated", "made",
                  "whereas", "party", "parties", "agreement", "contract", "confirmation", "counterparty", "among",
                  "amongst", "under", "for", "of", "in", "on", "as", "all", "any", "each", "such", "notices",
                  "notice", "copy", "attention", "attn", "signed", "executed", "for and on behalf", "behalf",
                  "lender", "borrower", "lessor", "lessee", "supplier", "buyer", "seller", "customer", "client",
                  "provider", "service provider", "licensor", "licensee", "dealer", "discloser", "recipient",
                  "guarantor", "company", "vendor", "purchaser", "tenant", "landlord", "contractor", "bank",
                  "where", "if", "when", "although", "while", "both", "either", "neither", "witness", "name",
                  "it", "its", "our", "we", "us", "you", "your", "they", "their", "he", "she", "is", "are", "was",
                  "a", "an", "schedule", "annex", "clause", "section", "article", "definitions", "term", "terms"}
_FORM_ALT = "|".join(re.escape(f) for f in sorted(LEGAL_FORMS, key=len, reverse=True))
_HEAD_ALT = "|".join(re.escape(h) for h in sorted(INSTITUTION_HEADS, key=len, reverse=True))
_UPPER = "A-ZÀ-ÖØ-Þ"
_WORD = rf"(?:[{_UPPER}0-9][\w'’\-.]*[\w.]|[{_UPPER}0-9])"  # a capitalised or all-caps word (may hold - ' .)
_JOIN = rf"(?:\s+|\s*&\s*|\s+(?:{'|'.join(_PARTICLES)})\s+|-)"
_RUN = rf"{_WORD}(?:{_JOIN}{_WORD})*"
_FORM_NAME = re.compile(rf"(?<![\w&])({_RUN}),?\s+(?:{_FORM_ALT})(?![\w&])")
_BANK_OF = re.compile(rf"(?<![\w&])((?:{_WORD}\s+)*(?:Bank|Banque|Banco|Banca|BANK)\s+of\s+(?:the\s+)?{_RUN})")
_HEAD_NAME = re.compile(rf"(?<![\w&])({_RUN}\s+(?:{_HEAD_ALT}))(?![\w&])")
_ROLE_DEF = re.compile(r"\s*(?:,\s*)?\(\s*(?:the\s+|hereinafter\s+(?:referred\s+to\s+as\s+)?(?:the\s+)?|as\s+)?[\"“”'‘]"
                       r"|,\s+(?:a|an)\s+(?:company|corporation|bank|partnership|limited|public|private|"
                       r"société|sociedad|societ|aktiengesellschaft|[a-z]+ (?:company|corporation))"
                       r"|,\s+(?:incorporated|registered|organi[sz]ed|established|having its|with (?:its )?registered)",
                       re.IGNORECASE)
_LABEL = re.compile(r"(?:^|\n)\s*[|*-]?\s*(?:Lender|Borrower|Lessor|Lessee|Supplier|Buyer|Seller|Customer|Client|"
                    r"Provider|Service Provider|Licensor|Licensee|Dealer|Counterparty|Discloser|Recipient|"
                    r"Disclosing Party|Receiving Party|Party [AB12]|Second Party|First Party|Vendor|Purchaser|"
                    r"Contractor|Tenant|Landlord|Bank|Issuer|Guarantor|Other party|Parties)\s*[:|]\s*",
                    re.IGNORECASE)
_BETWEEN = re.compile(r"\b(?:between|among|amongst|with|(?:entered into|made|concluded|executed) by)\s+",
                      re.IGNORECASE)
_ENUMERATOR = r"(?:\s*(?:\(\w{1,3}\)|\w{1,2}[.)])\s+)?"  # "(1) ", "(a) ", "1. " before a party


@dataclass(frozen=True)
class Candidate:
    span: str
    start: int
    party: bool  # stands where a contract names a party


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without leading noise words ("Between", "This"), trailing particles, commas and quotes."""
    while True:
        m = re.match(r"[\s,;:(\"“”'‘]*([\w'’.\-]+)", text[start:end])
        if m is None:
            return start, start
        word = m.group(1)
        if word.casefold().rstrip(".") in _LEADING_NOISE and end - (start + m.end()) > 0 and \
                re.match(rf"\s*(?:[&\-]|\s)?\s*[{_UPPER}0-9]", text[start + m.end():end]):
            start += m.end()
            continue
        start += m.start(1)
        break
    while end > start and text[end - 1] in " ,;:(\"“”'‘":
        end -= 1
    for inner in re.finditer(rf"(?<![\w&])(?:{_FORM_ALT})(?!\w)", text[start:end]):
        if re.match(r"\s+\S", text[start + inner.end():end]):
            end = start + inner.end()  # a legal form ends the name: "... Ltd. Notices go to" stops at "Ltd."
            break
    tail = re.search(rf"(?:\s+(?:{'|'.join(_PARTICLES)})|\s*&|-)$", text[start:end])
    if tail:
        end = start + tail.start()
    last = text[start:end].split()[-1:] or [""]
    if last[0].endswith(".") and not re.fullmatch(rf"(?:{_FORM_ALT})|(?:\w\.)+", last[0]):
        end -= 1  # the sentence's full stop, not an abbreviation's
    return start, end


def _run_before(text: str, end: int) -> tuple[int, int] | None:
    """The capitalised run that ends at `end` (walking back over words, particles and legal forms)."""
    head = text[max(0, end - 120):end]
    m = re.search(rf"({_RUN})(?:,?\s+(?:{_FORM_ALT}))?\s*$", head)
    if m is None:
        return None
    offset = max(0, end - 120)
    return _trim(text, offset + m.start(), offset + len(head.rstrip()))


def _run_after(text: str, start: int) -> tuple[int, int] | None:
    """The capitalised run (with its legal form) that begins at `start`."""
    m = re.match(rf"{_ENUMERATOR}\s*(?:the\s+)?({_RUN}(?:,?\s+(?:{_FORM_ALT})(?![\w&]))?)", text[start:start + 160])
    if m is None:
        return None
    return _trim(text, start + m.start(1), start + m.end(1))


def candidates(text: str) -> list[Candidate]:
    """Every name-like span of `text`, party positions marked, in order of first mention."""
    found: dict[str, Candidate] = {}

    def add(bounds: tuple[int, int] | None, party: bool) -> None:
        if bounds is None:
            return
        s, e = bounds
        span = text[s:e].strip()
        if len(span) < 2 or len(span) > 120 or not re.match(rf"[{_UPPER}]", span) or "\n" in span:
            return
        if span.casefold().rstrip(".") in _LEADING_NOISE or _is_form_only(span):
            return
        old = found.get(span)
        if old is None or (party and not old.party):
            found[span] = Candidate(span, s if old is None else min(s, old.start), party or (old is not None and old.party))

    for pat in (_FORM_NAME, _BANK_OF, _HEAD_NAME):
        for m in pat.finditer(text):
            add(_trim(text, m.start(), m.end()), False)
    for m in _ROLE_DEF.finditer(text):
        bounds = _run_before(text, m.start())
        named = _FORM_NAME.search(text[max(0, bounds[0] - 100):bounds[0]]) if bounds else None
        if bounds and named and text[:bounds[0]].endswith(", ") and not _FORM_NAME.search(text[bounds[0]:bounds[1]]):
            # "Alpenrose Medtech AG, Zurich (the "Supplier")": the place after the name, not the name
            bounds = _trim(text, bounds[0] - 100 + named.start() if bounds[0] >= 100 else named.start(),
                           (bounds[0] - 100 if bounds[0] >= 100 else 0) + named.end())
        add(bounds, True)
    for m in _LABEL.finditer(text):
        add(_run_after(text, m.end()), True)
    for m in _BETWEEN.finditer(text):
        first = _run_after(text, m.end())
        add(first, True)
        if first is None:
            continue
        rest = text[first[1]:first[1] + 200]
        # the second party: after "and" / "&", skipping the first party's role definition in brackets
        second = re.match(r"(?:\s*,?\s*(?:\([^)]*\)|,[^,]{0,80}?,))*\s*,?\s*(?:and|AND)\s+", rest)
        if second:
            add(_run_after(text, first[1] + second.end()), True)
    spans = sorted(found.values(), key=lambda c: c.start)
    return [c for c in spans if not any(c.span != o.span and _inside(c.span, o.span) and (o.party or not c.party)
                                        for o in spans)]


def _inside(short: str, long: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(short)}(?![\w])", long) is not None


def _is_form_only(span: str) -> bool:
    return re.fullmatch(rf"(?:{_FORM_ALT}|{_HEAD_ALT})", span) is not None


# ---- our own names ------------------------------------------------------------------------------------
_FORM_WORDS = {re.sub(r"[^\w\s]", "", f).casefold() for f in LEGAL_FORMS} | {"limited", "ltd", "the"}
_GENERIC = {"the", "bank", "group", "holding", "holdings", "services", "service", "international", "global",
            "capital", "first", "national", "general", "united", "company", "of"}


def canonical(name: str) -> str:
    """A name without case, punctuation, spacing or trailing legal form: "FINSERVE HOLDINGS LTD" and
    "Finserve Holdings Ltd." are both "finserve holdings"."""
    words = re.sub(r"[^\w\s&]", " ", name.casefold()).split()
    while words and (words[-1] in _FORM_WORDS or " ".join(words[-2:]) in _FORM_WORDS):
        words = words[:-2] if " ".join(words[-2:]) in _FORM_WORDS else words[:-1]
    return " ".join(words)


def _brand(name: str) -> str | None:
    """The first distinctive word of a name ("finserve" of "Finserve Holdings Ltd."), if it has one."""
    for word in canonical(name).split():
        if word not in _GENERIC and len(word) >= 3 and not word.isdigit():
            return word
    return None


class OwnNames:
    """Our own names and their affiliates, matched case- and punctuation-insensitively."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = [n for n in names if n.strip()]
        self._canon = {canonical(n) for n in self.names} - {""}
        self._brands = {b for n in self.names if (b := _brand(n)) is not None}

    def __bool__(self) -> bool:
        return bool(self.names)

    def is_ours(self, span: str) -> bool:
        """`span` is one of our names, an affiliate (same first distinctive word), or a piece of one of ours."""
        canon = canonical(span)
        if not canon:
            return False
        if canon in self._canon or any(canon in c.split() or f" {canon} " in f" {c} " for c in self._canon):
            return True
        brand = _brand(span)
        return brand is not None and canon.split()[0] == brand and brand in self._brands
