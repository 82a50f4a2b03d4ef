"""Values as contracts write them -> values as a schema wants them, done by code rather than the model.

A small model copies text far better than it converts it: asked for a number it wrote `1` for
`USD 250,000`; asked to pick the span `USD 250,000` it is right most of the time. So for number,
date and month/year fields the model chooses a span of the contract (`*_spans` list the
candidates, found by pattern) and `parse_*` turns the chosen span into the schema's value.

The patterns are written from how contracts write values in general, not from one generator:
amounts in any grouping and decimal convention (`CHF 1'200'000`, `EUR 875.000,00`, `1 200 000 EUR`),
with multipliers (`$1.2M`, `EUR 2.3 Mio.`, `GBP 750k`) or in words ("three million euros"), always
with a currency (a code, a symbol or a currency word: `ACN 123 456 789` or `NSW 2000` is an
identifier, not an amount); dates in ISO, numeric day-first and written forms; terms as durations
("24-month", "two years") or as end dates ("until 31 December 2027", converted against the start
date). `rank_by_context` orders candidates by the words around them (a deposit, a liability cap or
a notice period is not the value a field asks for) and `renewal_value` reads a renewal clause with
its negations and conditions.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass

# ---- currencies ---------------------------------------------------------------------------------
CURRENCY_CODES = (
    "USD EUR GBP JPY CHF AUD CAD NZD SEK NOK DKK ISK PLN CZK HUF RON BGN SGD HKD CNY CNH RMB INR ZAR BRL MXN "
    "KRW TRY ILS AED SAR QAR RUB THB MYR IDR PHP TWD").split()
_CODE_ALIASES = {"RMB": "CNY", "CNH": "CNY"}
# Longest first, so "US$" wins over "$".
_SYMBOLS = {"US$": "USD", "U.S.$": "USD", "AU$": "AUD", "A$": "AUD", "CA$": "CAD", "C$": "CAD", "NZ$": "NZD",
            "S$": "SGD", "HK$": "HKD", "SFr.": "CHF", "Fr.": "CHF", "$": "USD", "€": "EUR", "£": "GBP",
            "¥": "JPY", "₹": "INR", "₩": "KRW", "zł": "PLN", "kr.": "SEK"}
_CURRENCY_WORDS = {  # words after an amount ("250,000 euros"); longest first
    "United States dollars": "USD", "U.S. dollars": "USD", "US dollars": "USD", "Australian dollars": "AUD",
    "Canadian dollars": "CAD", "New Zealand dollars": "NZD", "Singapore dollars": "SGD",
    "Hong Kong dollars": "HKD", "dollars": "USD", "euros": "EUR", "euro": "EUR", "pounds sterling": "GBP",
    "sterling": "GBP", "pounds": "GBP", "Japanese yen": "JPY", "yen": "JPY", "Swiss francs": "CHF",
    "francs": "CHF", "Swedish kronor": "SEK", "Norwegian kroner": "NOK", "Danish kroner": "DKK",
    "Polish zloty": "PLN", "Indian rupees": "INR", "rand": "ZAR",
}


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_CODE = rf"\b(?:{'|'.join(CURRENCY_CODES)})\b"
_SYMBOL = _alternation(list(_SYMBOLS))
_CUR_WORD = rf"(?:{_alternation(list(_CURRENCY_WORDS))})\b"
_NUM = (r"\d{1,3}(?:(?:,|\.|'|’|\u00a0|\u202f| )\d{3})+(?:[.,]\d{1,2})?(?!\d)"  # grouped: 1,250,000.00 / 875.000,00
        r"|\d+(?:[.,]\d+)?")  # plain: 1250000 / 1.2 / 2,5
_MULT_WORDS = {"thousand": 1e3, "k": 1e3, "tsd": 1e3, "tsd.": 1e3, "million": 1e6, "millions": 1e6,
               "mio": 1e6, "mio.": 1e6, "mln": 1e6, "mln.": 1e6, "mn": 1e6, "mm": 1e6, "m": 1e6,
               "billion": 1e9, "billions": 1e9, "bn": 1e9, "mrd": 1e9, "mrd.": 1e9}
_MULT = r"(?:\s?(?:thousand|millions?|billions?|mio\.?|mln\.?|mrd\.?|tsd\.?|mn|mm|bn|m|k)(?![\w]))"
_WORD_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_WORD_NUMBERS.update({w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety"
                                                        .split()) if i >= 2})
_WORDS = "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
_WORD_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER_WORDS = (rf"(?:{_WORDS}|a)(?:[\s-]+(?:and\s+)?(?:{_WORDS}|hundred|thousand|million|billion))*")
_AMOUNT = re.compile(
    rf"(?:{_CODE}|{_SYMBOL})\s?(?:{_NUM}){_MULT}?(?:\s(?:{_CUR_WORD}))?"  # USD 1,250,000.00 / $1.2M / EUR 2.3 Mio.
    rf"|\b(?:{_NUM}){_MULT}?\s?(?:{_CODE}|€|£|¥)"  # 875.000,00 EUR / 500 000 €
    rf"|\b(?:{_NUM}){_MULT}?\s(?:{_CUR_WORD})"  # 250,000 euros / 2.5 million US dollars
    rf"|\b{_NUMBER_WORDS}\s(?:{_CUR_WORD})"  # three million euros
    rf"|(?:{_CODE})\s{_NUMBER_WORDS}\b(?:\s(?:{_CUR_WORD}))?",  # EUR three million
    re.IGNORECASE)


def _currency_of_marker(marker: str) -> str | None:
    up = marker.upper()
    if up in CURRENCY_CODES:
        return _CODE_ALIASES.get(up, up)
    for sym, code in _SYMBOLS.items():
        if marker == sym:
            return code
    for word, code in _CURRENCY_WORDS.items():
        if marker.casefold() == word.casefold():
            return code
    return None


def currency_words(code: str) -> list[str]:
    """How texts write a currency besides its code: `USD` -> ["US$", "$", "US dollars", ...]."""
    if code.upper() not in CURRENCY_CODES:
        return []
    marks = [s for s, c in _SYMBOLS.items() if c == code.upper() and not s.isalpha()]
    return marks + [w for w, c in _CURRENCY_WORDS.items() if c == code.upper()]


def _unique(found: list[str]) -> list[str]:
    return list(dict.fromkeys(s.strip() for s in found if s.strip()))


def amount_spans(text: str) -> list[str]:
    """Every span that reads as an amount of money (with a currency), in order, one per (value, currency).

    A bare code must be upper case ("EUR", not "eur" inside a word); the same amount written twice
    ("USD 2,000,000 (two million US dollars)") is offered once, as it is first written.
    """
    seen: dict[tuple[float | None, str | None], str] = {}
    for m in _AMOUNT.finditer(text):
        span = m.group(0).strip()
        code = re.match(r"[A-Za-z]{3}\b", span)
        if code and code.group(0).upper() in CURRENCY_CODES and not code.group(0).isupper():
            continue  # "the usd" in prose, or a word that happens to begin with a code
        if re.search(r"[A-Za-z]{3}$", span) and span[-3:].upper() in CURRENCY_CODES and not span[-3:].isupper():
            continue
        key = (parse_amount(span), currency_of(span))
        if key[0] is None:
            continue
        seen.setdefault(key, span)
    return list(seen.values())


def currency_of(span: str) -> str | None:
    """The ISO code of the currency an amount span is written in (`$1.2M` -> USD, `1.200.000 EUR` -> EUR)."""
    for sym in sorted(_SYMBOLS, key=len, reverse=True):
        if sym in span and not sym.isalpha():
            return _SYMBOLS[sym]
    words = re.search(_CUR_WORD, span, re.IGNORECASE)
    if words:
        return _currency_of_marker(words.group(0))
    code = re.search(_CODE, span)
    return _currency_of_marker(code.group(0)) if code else None


def parse_number(digits: str) -> float | None:
    """`1'200'000` -> 1200000, `875.000,00` -> 875000, `1,250,000.00` -> 1250000, `2,5` -> 2.5, `1.2` -> 1.2.

    Apostrophes and spaces only group. With both `.` and `,`, the last is the decimal mark; one kind
    used more than once groups; used once, it groups when exactly three digits follow, else it is the
    decimal mark (so `1.2` is 1.2 and `875.000` is 875000).
    """
    s = re.sub(r"['’\u00a0\u202f ]", "", digits)
    if not re.fullmatch(r"[\d.,]+", s) or not s[0].isdigit():
        return None
    dots, commas = s.count("."), s.count(",")
    if dots and commas:
        dec = "." if s.rfind(".") > s.rfind(",") else ","
        grp = "," if dec == "." else "."
        s = s.replace(grp, "").replace(dec, ".")
    elif dots + commas:
        mark = "." if dots else ","
        if s.count(mark) > 1 or re.search(rf"\{mark}\d{{3}}$", s):
            s = s.replace(mark, "")
        else:
            s = s.replace(mark, ".")
    try:
        return float(s)
    except ValueError:
        return None


def words_to_number(words: str) -> float | None:
    """'three million' -> 3e6, 'two hundred and fifty thousand' -> 250000; None without a number word."""
    total, current, seen = 0, 0, False
    for w in re.findall(r"[a-z]+", words.casefold()):
        if w in _WORD_NUMBERS:
            current += _WORD_NUMBERS[w]
            seen = True
        elif w == "a" and not seen:
            current, seen = 1, True
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in ("thousand", "million", "billion"):
            total += max(current, 1) * _WORD_SCALES[w]
            current, seen = 0, True
        elif w != "and" and seen:
            break
    value = total + current
    return float(value) if seen and value > 0 else None


def parse_amount(span: str) -> float | None:
    """Any span `amount_spans` finds -> its value: `CHF 1'200'000` -> 1200000.0, `EUR 2.3 Mio.` -> 2300000.0,
    `GBP 750k` -> 750000.0, `three million euros` -> 3000000.0; None without a figure."""
    m = re.search(rf"({_NUM})({_MULT})?", span, re.IGNORECASE)
    if m is None:
        return words_to_number(span)
    value = parse_number(m.group(1))
    if value is None:
        return None
    mult = (m.group(2) or "").strip().casefold()
    return value * _MULT_WORDS.get(mult, 1.0)


# ---- dates --------------------------------------------------------------------------------------
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = (r"(?:Jan(?:uary|\.)?|Feb(?:ruary|\.)?|Mar(?:ch|\.)?|Apr(?:il|\.)?|May|June?|July?|Aug(?:ust|\.)?"
          r"|Sep(?:tember|t\.?|\.)?|Oct(?:ober|\.)?|Nov(?:ember|\.)?|Dec(?:ember|\.)?)(?![a-z])")
_ORD = r"(?:st|nd|rd|th)?"
_DATE = re.compile(
    rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b"  # 2025-02-12
    rf"|\b\d{{1,2}}[./-]\d{{1,2}}[./-]\d{{4}}\b"  # 12.02.2025, 12/02/2025
    rf"|\b(?:the\s)?\d{{1,2}}{_ORD}(?:\sday)?(?:\sof)?[\s-]{_MONTH}[,\s-]\s?\d{{4}}\b"  # 12 February 2025, 1st of March 2024
    rf"|\b{_MONTH}\s\d{{1,2}}{_ORD},?\s\d{{4}}\b")  # February 12, 2025 / Feb. 12 2025


def date_spans(text: str) -> list[str]:
    return _unique(_DATE.findall(text))


def parse_date(span: str) -> str | None:
    """Any format `date_spans` finds -> ISO `YYYY-MM-DD`; day-first for `12.02.2025` and `12/02/2025`."""
    s = span.strip()
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", s)
    if m:
        return _iso(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = re.fullmatch(r"(\d{1,2})[./-](\d{1,2})[./-](\d{4})", s)
    if m:
        first, second = int(m.group(1)), int(m.group(2))
        if second > 12 >= first:  # 02/28/2025 can only be month-first
            first, second = second, first
        return _iso(int(m.group(3)), second, first)
    low = s.casefold()
    month = next((i + 1 for i, name in enumerate(_MONTHS) if re.search(rf"\b{name[:3]}", low)), None)
    nums = [int(n) for n in re.findall(r"\d+", s)]
    years = [n for n in nums if n >= 1000]
    days = [n for n in nums if n < 100]
    if month is None or not years or not days:
        return None
    return _iso(years[0], month, days[0])


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return dt.date(year, month, day).isoformat()
    except ValueError:
        return None


# ---- durations and end dates ---------------------------------------------------------------------
_UNIT = r"(?:months?|years?|yrs?\.?|mos?\.)(?![\w])"
_DURATION = re.compile(
    rf"\b(?:\d+|(?:{_WORDS})(?:-(?:{_WORDS}))?)(?:\s?\(\d+\))?(?:\s|-){_UNIT}", re.IGNORECASE)
_END_WORDS = (r"until|till|to|through|ending on|ends on|expiring on|expires on|expire on|terminating on"
              r"|terminates on|up to and including|ending|expiring|and ending on")
_END_DATE = re.compile(rf"\b(?:{_END_WORDS})\s(?:and\s including\s)?(?:the\s)?(?:{_DATE.pattern})", re.IGNORECASE)
END_DATE_KIND = "until"  # a term span that is an end date: converted against the start date


def duration_spans(text: str) -> list[str]:
    return _unique(_DURATION.findall(text))


def term_spans(text: str) -> list[str]:
    """Durations, then end dates ("until 31 December 2027"): every way a contract states its term."""
    return duration_spans(text) + _unique([m.group(0) for m in _END_DATE.finditer(text)])


def is_end_date(span: str) -> bool:
    return _END_DATE.fullmatch(span.strip()) is not None


def parse_duration(span: str, unit: str) -> int | None:
    """`three (3) years` -> 36 in months (unit 'month') or 3 in years (unit 'year'); `24-month` -> 24;
    None if unreadable (an end date needs the start: `months_between`)."""
    if is_end_date(span):
        return None
    s = span.lower()
    digits = re.findall(r"\d+", s)
    if digits:
        n = int(digits[-1])
    else:
        parts = re.findall(_WORDS, s)
        if not parts:
            return None
        n = sum(_WORD_NUMBERS[p] for p in parts)
    in_years = re.search(r"\by(?:ea)?rs?\b", s) is not None
    if unit == "month":
        return n * 12 if in_years else n
    return n if in_years else (n // 12 if n % 12 == 0 else None)


def end_date_of(span: str) -> str | None:
    found = _DATE.search(span)
    return parse_date(found.group(0)) if found else None


def months_between(start_iso: str, end_iso: str) -> int | None:
    """Whole months of a term from `start` to `end` inclusive: 2025-01-01 .. 2027-12-31 -> 36."""
    try:
        start, end = dt.date.fromisoformat(start_iso), dt.date.fromisoformat(end_iso) + dt.timedelta(days=1)
    except ValueError:
        return None
    months = (end.year - start.year) * 12 + end.month - start.month
    if end.day < start.day and (end.day - start.day) < -15:
        months -= 1
    elif end.day > start.day and end.day - start.day > 15:
        months += 1
    return months if months > 0 else None


def duration_unit(name: str, description: str) -> str | None:
    """'month' or 'year' when an integer field counts a duration in that unit (by its name or description)."""
    words = f"{name} {description}".lower()
    for unit in ("month", "year"):
        if unit in words:
            return unit
    return None


# ---- context: which candidate is the one a field asks for ------------------------------------------
@dataclass(frozen=True)
class Cues:
    """Words before (and right after) a candidate that make it likelier (`good`) or a distractor (`bad`)."""

    good: tuple[str, ...]
    bad: tuple[str, ...]


AMOUNT_CUES = Cues(
    good=(r"principal", r"notional", r"purchase price", r"contract (?:price|value|sum)", r"total", r"aggregate",
          r"consideration", r"facility amount", r"(?:loan|facility|credit) (?:of|amount)", r"commitment",
          r"rent", r"lease payments?", r"fees? payable", r"total fees", r"annual fees?", r"price",
          r"value", r"liquidated damages", r"damages", r"penalty", r"amount of the", r"sum of",
          r"make(?:s)? available", r"lend", r"borrow", r"in the amount of", r"amounting to", r"amount[s]? to"),
    bad=(r"deposit", r"(?:a|an|the|one-off|one off|arrangement|commitment|agency|set-?up|late|administration|"
         r"administrative|exit|termination|cancellation|processing|handling|upfront|prepayment|break) fees?\b",
         r"fee of", r"cap(?:ped)?\b", r"liabilit", r"liable", r"exceed", r"insurance", r"insured", r"indemni",
         r"cover(?:age)?\b", r"interest", r"share capital", r"capital of", r"registered", r"affiliate",
         r"subsidiar", r"group compan", r"parent", r"guarantee", r"minimum", r"threshold", r"excess",
         r"deductible", r"reimburs", r"expenses", r"costs?\b", r"\btax", r"\bvat\b", r"stamp duty", r"commission",
         r"bonus", r"credits?\b", r"discount", r"\blate\b", r"arrears", r"per (?:day|hour|occurrence|incident|event)",
         r"hourly", r"daily", r"turnover", r"revenue", r"retainer", r"escrow", r"holdback", r"retention",
         r"surety", r"bond", r"security\b", r"overdue", r"surcharge", r"charge of", r"up to"))
DATE_CUES = Cues(
    good=(r"dated", r"made on", r"made as of", r"entered into", r"as of", r"effective", r"commenc", r"with effect",
          r"signed", r"executed", r"date of this", r"starting", r"start", r"begin", r"from", r"made this",
          r"made the", r"on"),
    bad=(r"until", r"expir", r"\bends?\b", r"ending", r"terminat", r"maturity", r"matur", r"repa(?:y|id)",
         r"no later than", r"\bby\b", r"deadline", r"invoice", r"payment", r"incorporated", r"registered",
         r"amended", r"supersed", r"previous", r"prior", r"through", r"till", r"\bto\b", r"last", r"final",
         r"notice", r"delivery", r"deliver"))
TERM_CUES = Cues(
    good=(r"\bterm\b", r"period of", r"\bfor\b", r"duration", r"remain in (?:full )?(?:force|effect)", r"initial",
          r"runs?\b", r"continue", r"tenor", r"maturity", r"\blasts?\b", r"\bvalid"),
    bad=(r"notice", r"renew", r"successive", r"extend", r"extension", r"further", r"surviv", r"after (?:the )?"
         r"(?:termination|expiry|expiration)", r"within", r"payment", r"pay", r"interest period", r"each",
         r"grace", r"warranty", r"probation", r"invoice", r"confidential", r"thereafter", r"additional",
         r"\bprior\b", r"retain", r"records", r"non-?compet", r"non-?solicit"))


def _window(text: str, start: int, end: int) -> tuple[str, str]:
    """The clause before a mention (back to the last sentence or clause break, at most 120 characters)
    and the few words after it."""
    before = text[max(0, start - 120):start]
    cut = max(before.rfind(". "), before.rfind("\n"), before.rfind("; "))
    before = before[cut + 1:] if cut >= 0 else before
    after = text[end:end + 40]
    stop = re.search(r"[.;\n]", after)
    return before, after[:stop.start()] if stop else after


def context_score(text: str, span: str, cues: Cues) -> int:
    """Good cues minus bad cues around the span's mentions (the best mention counts): a bad cue in the
    clause before the span or right after it weighs 2, a good cue 1; the nearest cue decides ties."""
    best: int | None = None
    for m in re.finditer(re.escape(span), text):
        before, after = _window(text, m.start(), m.end())
        near = before[-45:]
        score = 0
        for pat in cues.good:
            if re.search(pat, near, re.IGNORECASE):
                score += 2
            elif re.search(pat, before, re.IGNORECASE):
                score += 1
        for pat in cues.bad:
            if re.search(pat, near, re.IGNORECASE) or re.search(pat, after, re.IGNORECASE):
                score -= 3
            elif re.search(pat, before, re.IGNORECASE):
                score -= 1
        best = score if best is None else max(best, score)
    return best if best is not None else 0


def rank_by_context(spans: list[str], text: str, cues: Cues,
                    key: Callable[[str], object] | None = None) -> list[str]:
    """The spans a field may take, best first: ordered by `context_score` (then by first mention), without
    those scored below zero when some score zero or more, and without later spans of the same value
    (`key`). Never empty when `spans` is not: code narrows, the model decides among what is left."""
    scored = sorted(((context_score(text, s, cues), i, s) for i, s in enumerate(spans)), key=lambda t: (-t[0], t[1]))
    if scored and scored[0][0] >= 0:
        scored = [t for t in scored if t[0] >= 0]
    out: list[str] = []
    seen: set[object] = set()
    for _, _, s in scored:
        k = key(s) if key is not None else s
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out


def decided(spans: list[str], text: str, cues: Cues) -> bool:
    """True when the first of the ranked `spans` is clearly the one: its context scores above zero and
    at least 3 above every other's."""
    if len(spans) < 2:
        return len(spans) == 1
    scores = [context_score(text, s, cues) for s in spans]
    return scores[0] > 0 and all(scores[0] - s >= 3 for s in scores[1:])


# ---- yes/no facts ---------------------------------------------------------------------------------
# A negation cue up to three words before a mention negates it (NegEx-style, as clinical NLP does).
_NEGATION = r"\b(?:not|no|never|without|neither|nor|cannot|none)\b|n't\b"


def cue_value(stem: str, text: str) -> bool | None:
    """A yes/no fact read by code: False when some mention of `stem` is negated, True when mentions
    exist and none is, None when the text never mentions it (the model then decides).

    Small models cannot read negation ("shall not renew automatically" reads as renewal to a 135M
    model: chance level on the clause alone, whatever the prompt), so the cue and its negation are
    found by pattern. For renewal, `renewal_value` reads the clause with its conditions instead.
    """
    if stem.casefold().startswith("renew"):
        return renewal_value(text)
    mentions = list(re.finditer(rf"\b{re.escape(stem)}", text, re.IGNORECASE))
    if not mentions:
        return None
    for m in mentions:
        before = " ".join(text[: m.start()].split()[-3:])
        if re.search(_NEGATION, before, re.IGNORECASE):
            return False
    return True


_RENEW = r"(?:renew\w*|extend\w*|extension|roll(?:s|ed)? over|rollover|prolong\w*)"
# Opting out of a renewal that otherwise happens: "unless either party gives notice of its intention
# not to renew", "either party may serve a notice of non-renewal" -> it renews automatically.
_OPT_OUT = re.compile(
    rf"(?:notice|notify|notifies|notified|elects?|informs?|objects?|unless|opt(?:s)? out)[^.;]{{0,90}}?"
    rf"(?:not to {_RENEW}|non-?renewal|non-?extension|terminat\w* (?:it|this)|to terminate|objection)"
    rf"|unless[^.;]{{0,80}}(?:terminat|notice|objects?|cancel)", re.IGNORECASE)
_AUTOMATIC = re.compile(
    rf"automatic(?:ally)?[^.;]{{0,25}}{_RENEW}|{_RENEW}[^.;]{{0,40}}automatic(?:ally)?|auto-?renew\w*|evergreen"
    rf"|tacit(?:ly)?[^.;]{{0,20}}{_RENEW}|{_RENEW}\w*[^.;]{{0,30}}tacit"
    rf"|(?:shall|will) (?:be )?(?:{_RENEW}|continue)[^.;]{{0,60}}(?:successive|further|subsequent|additional|"
    rf"consecutive|from year to year|year-to-year|month-to-month|each year)"
    rf"|continue[^.;]{{0,30}}(?:from year to year|year to year|month to month|indefinitely)"
    rf"|(?:successive|consecutive) (?:renewal )?(?:periods?|terms?)", re.IGNORECASE)
# Renewal that needs someone's act or agreement, or that is excluded outright -> it does not renew by itself.
_NOT_AUTOMATIC = re.compile(
    rf"(?:not|never|no)\b[^.;]{{0,30}}(?:automatic(?:ally)?|auto-?)\s?{_RENEW}"
    rf"|(?:shall|will|does|do|is|are|cannot|can)\s?(?:not|n't)\b(?: be)?[^.;]{{0,20}}{_RENEW}"
    rf"|\b(?:won't|doesn't|isn't|shan't)\s[^.;]{{0,15}}{_RENEW}"
    rf"|\bno\s(?:automatic\s|tacit\s)?(?:renewal|extension|rollover|option to {_RENEW})"
    rf"|renewal\s*:\s*(?:none|no|n/a|not applicable)"
    rf"|non-?renewable|without (?:any )?(?:renewal|extension)"
    rf"|(?:may|can|could|might)\s(?:only\s)?(?:be\s)?{_RENEW}[^.;]{{0,60}}(?:mutual|written|agree|consent|"
    rf"amendment|sign|both parties|the parties)"
    rf"|{_RENEW}[^.;]{{0,40}}(?:requires?|subject to|only by|only with|only upon|only if|by mutual|upon mutual|"
    rf"with the (?:prior )?(?:written )?(?:consent|agreement))"
    rf"|(?:expires?|terminates?|ends?) (?:automatically )?(?:at|on|upon) (?:the end|expiry|the expiration)"
    rf"[^.;]{{0,40}}(?:without|and (?:shall|will) not)", re.IGNORECASE)


def renewal_value(text: str) -> bool | None:
    """Whether a contract renews automatically, read from its renewal clauses; None when it has none.

    Per sentence mentioning renewal or extension: an opt-out by notice ("unless either party gives
    notice of its intention not to renew") or automatic wording ("renews automatically", "successive
    one-year periods", "tacitly renewed") says yes; a negated renewal ("shall not renew", "Renewal:
    none.", "non-renewable") or one that needs the parties' act ("may be renewed by mutual written
    agreement", "any extension requires a written amendment") says no. The opt-out is tested first,
    so its own "not to renew" is not read as a negation. No renewal wording at all: None.
    """
    yes = no = 0
    for sentence in re.split(r"(?<=[.;!?])\s+|\n+", text):
        if not re.search(rf"{_RENEW}|auto-?renew|evergreen|tacit|year to year", sentence, re.IGNORECASE):
            continue
        automatic = _AUTOMATIC.search(sentence) is not None
        opt_out = _OPT_OUT.search(sentence) is not None and (automatic or re.search(
            r"not to renew|non-?renewal", sentence, re.IGNORECASE) is not None)
        rest = _OPT_OUT.sub(" ", sentence) if opt_out else sentence
        negative = _NOT_AUTOMATIC.search(rest) is not None
        if opt_out or (automatic and not negative):
            yes += 1
        elif negative:
            no += 1
    return None if yes == no else yes > no  # none, or as many of each: the model decides


def mentions_renewal(text: str) -> bool:
    """Whether the text says anything about renewal or extension at all."""
    return re.search(rf"{_RENEW}|auto-?renew|evergreen|tacit", text, re.IGNORECASE) is not None


def not_near(spans: list[str], text: str, avoid: list[str]) -> list[str]:
    """`spans` without those whose sentence holds one of the `avoid` words (whole words, any case);
    all of them when that would leave none. "A security deposit of $1,000 is payable" is not the
    contract's value when the schema's amount avoids "deposit"."""
    if not avoid:
        return spans
    words = re.compile(r"\b(?:" + "|".join(re.escape(w.strip()) for w in avoid) + r")\b", re.IGNORECASE)
    sentences = re.split(r"(?<=[.;!?])\s+|\n+", text)
    kept = [s for s in spans if not any(s in sent and words.search(sent) for sent in sentences)]
    return kept or spans
