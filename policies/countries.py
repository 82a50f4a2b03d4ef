"""Countries as upstream systems write them: ISO 3166-1 alpha-2 ("KY"), alpha-3 ("CYM") or a name
("Cayman Islands", "the Caymans", "Côte d'Ivoire"), resolved to alpha-2.

The table (policies/countries.tsv) comes from the ISO 3166-1 list of Debian's iso-codes, with colloquial
names added (UK, UAE, DPRK, Burma, BVI, ...) and French and German names of the listed and most common
countries (Corée du Nord, Nordkorea, Suisse, Schweiz, ...). A name that two countries share ("Virgin Islands") is dropped:
it names neither. Names are matched on their words (case, accents and punctuation aside), so they can be
found inside free text too (`find_in`), longest name first ("South Sudan" before "Sudan").
"""
from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from importlib import resources

from policies.risk_readers import on

MAX_NAME_WORDS = 6  # "Saint Vincent and the Grenadines"


# Letters of their own that Unicode does not decompose into a Latin letter and an accent, so the ASCII fold would
# drop them ("lønn" -> "lnn", "wpłata" -> "wpata"): spelled as they are written without them (lønn -> lonn,
# værdi -> vaerdi, Straße -> strasse), the spelling of the lexicographers' files (policies/risk_lexicon.json).
_OWN_LETTERS = str.maketrans({"ø": "o", "æ": "ae", "œ": "oe", "ß": "ss", "ł": "l", "đ": "d", "ð": "d", "þ": "th",
                              "ı": "i", "ħ": "h", "ŧ": "t", "ŀ": "l"})


def words(text: str) -> tuple[str, ...]:
    """Lower-case ASCII words of `text`: accents folded, letters of their own spelled out (_OWN_LETTERS),
    apostrophes dropped ("Côte d'Ivoire" -> cote divoire)."""
    if on("letters_of_their_own"):
        text = text.lower().translate(_OWN_LETTERS)
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().casefold().replace("'", "")
    return tuple(re.findall(r"[a-z0-9]+", folded))


@functools.cache
def _table() -> tuple[dict[str, str], dict[tuple[str, ...], str]]:
    """(alpha-2 and alpha-3 code -> alpha-2, name words -> alpha-2)."""
    codes: dict[str, str] = {}
    names: dict[tuple[str, ...], set[str]] = {}
    text = resources.files("policies").joinpath("countries.tsv").read_text(encoding="utf-8")
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        alpha2, alpha3, spelled = line.split("\t")
        codes[alpha2] = codes[alpha3] = alpha2
        for name in spelled.split("|"):
            key = words(name)
            if key and key[0] == "the":
                key = key[1:]
            names.setdefault(key, set()).add(alpha2)
    return codes, {k: next(iter(v)) for k, v in names.items() if len(v) == 1 and k}


def is_code(code: str) -> bool:
    """An ISO 3166-1 alpha-2 code as the policy writes it (capitals)."""
    return code.isupper() and len(code) == 2 and _table()[0].get(code) == code


def resolve(value: str) -> str | None:
    """The alpha-2 code a field's whole value names: a code (any case) or a name; None when it names none."""
    text = value.strip()
    codes, names = _table()
    if 2 <= len(text) <= 3 and text.isalpha() and text.upper() in codes:
        return codes[text.upper()]
    key = words(text)
    if key and key[0] == "the":
        key = key[1:]
    return names.get(key)


def find_in(tokens: Sequence[str]) -> list[str]:
    """Alpha-2 codes of the country names in a text's words, longest name first at each position."""
    names = _table()[1]
    found: list[str] = []
    i = 0
    while i < len(tokens):
        for n in range(min(MAX_NAME_WORDS, len(tokens) - i), 0, -1):
            code = names.get(tuple(tokens[i:i + n]))
            if code is not None:
                found.append(code)
                i += n
                break
        else:
            i += 1
    return found


# USPS Publication 28: a US address ends "CITY, ST 12345" (or ZIP+4); the territories have ISO codes of their own.
_US_STATES = frozenset(
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY NC ND OH OK "
    "OR PA RI SC SD TN TX UT VT VA WA WV WI WY".split())
_US_TERRITORIES = frozenset({"PR", "GU", "VI", "AS", "MP"})
_US_LAST_LINE = re.compile(r"(?:^|[\s,])([A-Z]{2})\.?\s+\d{5}(?:-\d{4})?\s*$")


def postal_country(address: str) -> str | None:
    """The country a US-format last line names ("Cuba, MO 65453" is Missouri), or None for any other format."""
    m = _US_LAST_LINE.search(address.strip())
    if m is None:
        return None
    state = m.group(1)
    return "US" if state in _US_STATES else state if state in _US_TERRITORIES else None
