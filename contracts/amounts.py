"""Amounts of money as contracts write them -> numbers, done by code rather than the model (see contracts/normalize.py).

Any grouping and decimal convention (`CHF 1'200'000`, `EUR 875.000,00`, `1 200 000 EUR`), with multipliers
(`$1.2M`, `EUR 2.3 Mio.`, `GBP 750k`) or in words ("three million euros"), always with a currency (a code, a
symbol or a currency word: `ACN 123 456 789` or `NSW 2000` is an identifier, not an amount). Numbers written
as words (`NUMBER_WORDS`, `words_to_number`) serve the terms in contracts/dates.py too.
"""
from __future__ import annotations

import re

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
NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
NUMBER_WORDS.update({w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety"
                                                        .split()) if i >= 2})
NUMBER_WORD = "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
_WORD_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER_WORDS = (rf"(?:{NUMBER_WORD}|a)(?:[\s-]+(?:and\s+)?(?:{NUMBER_WORD}|hundred|thousand|million|billion))*")
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


def unique_spans(found: list[str]) -> list[str]:
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
        if w in NUMBER_WORDS:
            current += NUMBER_WORDS[w]
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
