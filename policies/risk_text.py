"""Reading facts as other systems write them: attribute names, numbers, dates, durations and words.

Attribute names are compared as bags of words: camelCase, separators and case do not matter
("DeviceNew", "new-device", "is_new_device_flag" are one name), plurals are folded, a time window
("_24h", "_last_7_days", "per_hour", "today") and a unit ("_days", "_years") are read off the name
and kept apart, and filler words ("is", "has", "flag", "count", "num", ...) are dropped ("flag" opening a longer
name is a ship's flag and kept: "flag_changes_12m"). Values may
be numbers or text ("9,500", "USD 9.500,00", "4.2M", "90%", "3 days", "2024-05-01").
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime

from policies.countries import words
from policies.risk_readers import on

# Hours in one unit; "m" is minutes ("30m"), "mo"/"mon"/"month" months.
UNIT_HOURS = {"minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0, "month": 730.0, "year": 8766.0}
_UNIT_WORDS = {
    "m": "minute", "min": "minute", "mins": "minute", "minute": "minute", "h": "hour", "hr": "hour", "hrs": "hour",
    "hour": "hour", "d": "day", "day": "day", "w": "week", "wk": "week", "wks": "week", "week": "week",
    "mo": "month", "mon": "month", "month": "month", "mth": "month", "mths": "month", "mos": "month", "y": "year",
    "yr": "year", "yrs": "year", "year": "year",
}
_WINDOW_WORDS = {"today": "day", "daily": "day", "hourly": "hour", "weekly": "week", "monthly": "month",
                 "yearly": "year", "annual": "year", "annually": "year"}
_WINDOW_LEADS = frozenset({"last", "past", "previous", "prior", "this", "same"})  # "last_hour", "same_day": a span
_AGO = frozenset({"ago", "before", "earlier"})  # after a unit, even an abbreviated one: the name is an elapsed time
_BARE_UNITS = frozenset({"minute", "hour", "hr", "day", "week", "month", "mth", "year", "yr"})  # "min" is too often "minimum"
_FILLER = frozenset("is has was flag flg ind indicator count cnt num number nbr nb of the a an at ago on in per last past "
                    "previous prior within with qty bool yn status time".split())
_FILLER |= frozenset("unit item piece pc ton tonne kg kilo lb oz ounce barrel bbl".split())  # price_per_kg is a price
# A flag marker ("pep_flag", "off_hrs_flg") says the value is a yes or no; opening a longer name it is a ship's flag
# ("flag_changes_12m", "flag_registry"), which a name loses its meaning without: "account_change" is no reflagging.
_MARKERS = frozenset({"flag", "flg"})
_PERCENT_WORDS = frozenset({"pct", "percent", "percentage"})
_COUNT_WORDS = frozenset({"count", "cnt", "num", "number", "nbr", "nb", "qty", "quantity"})  # filler, but not money
# ISO 4217 codes that say which currency a number is in ("declared_income_eur"): a unit, not part of the meaning.
# Codes that are also words or abbreviations of attribute names are left out (COP: confirmation of payee; SAR: a
# suspicious activity report; TRY, ALL).
CURRENCY_WORDS = frozenset(
    "usd eur gbp chf jpy cny rmb hkd sgd aud nzd cad inr brl mxn zar rub aed qar kwd bhd ils sek nok dkk pln czk "
    "huf ron krw twd thb myr idr php vnd pkr bdt ngn kes egp clp uah kzt".split())
_TRUE = frozenset("true yes y t 1 on added changed new present detected match matched hit positive confirmed "
                  "ja oui si sim tak ya evet hai ano igen ndiyo".split())  # yes in German and Nordic, French, Spanish
# and Italian, Portuguese, Polish, Malay and Indonesian, Turkish, Japanese, Czech, Hungarian, Swahili
_FALSE = frozenset("false no n f 0 off none null nil not negative clear cleared unchanged absent na passed "
                   "nein non nie nej nao tidak bukan belum hayir iie ne nem hapana".split()) | {
    "no match", "no hit", "no hits", "not found", "n a", "not applicable", "not listed", "no record"}
# Yes and no of more European languages (reader `more_yes_no_words`): Romanian, Serbian, Croatian, Bulgarian "da",
# Albanian "po", Finnish "kyllä", Estonian "jah", Lithuanian "taip"; Dutch and Afrikaans "nee", Norwegian and
# Icelandic "nei", Romanian "nu", Albanian "jo", Finnish and Estonian "ei". Without them a check named for its
# success ("callback_done": "nee") read a no as unclear, and another reader took it for a pass.
_MORE_SAYS = dict.fromkeys("da po kylla jah taip".split(), True) | dict.fromkeys("nee nei nu jo ei".split(), False)
_SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₽": "RUB", "₩": "KRW", "₺": "TRY"}
_HEDGE = re.compile(r"^(?:within|about|approx\.?|approximately|around|circa|ca\.|roughly|nearly|almost|some|~|±|\+/-)\s*",
                   re.IGNORECASE)  # "within 4%", "about 12", "~5": the number is what counts
_RANGE = re.compile(r"\s*(\d[\d,.]{2,})\s*(?:-|–|to)\s*(\d[\d,.]{2,}\s*[a-zA-Z]*)\s*")
_SCALE = {"k": 1e3, "m": 1e6, "mm": 1e6, "mn": 1e6, "million": 1e6, "b": 1e9, "bn": 1e9, "billion": 1e9,
          "lakh": 1e5, "lakhs": 1e5, "lac": 1e5, "lacs": 1e5, "crore": 1e7, "crores": 1e7}  # South Asian scale words
_SOUTH_ASIAN_SCALE = frozenset({"lakh", "lakhs", "lac", "lacs", "crore", "crores"})
# Currency prefixes written as letters, not ISO codes: Kenyan, Tanzanian and Ugandan shillings, dirhams; "Rs" is
# the rupee of India, Pakistan, Sri Lanka and Nepal alike, so it names no one currency.
_LOCAL_PREFIX = re.compile(r"^(ksh|kshs|tsh|ush|dhs|dh|rs|₨|৳)\.?\s*(?=\d)", re.IGNORECASE)
_LOCAL_CODES = {"ksh": "KES", "kshs": "KES", "tsh": "TZS", "ush": "UGX", "dhs": "AED", "dh": "AED", "৳": "BDT"}

# A word that denies what follows it within NEGATION_REACH words: "not verified", "no prior privacy coin activity".
NEGATIONS = frozenset({"not", "no", "non", "without", "never", "none", "nor"})
NEGATION_REACH = 2


def singular(token: str) -> str:
    """A crude plural fold, applied alike to names, policy words and text: "deposits" -> "deposit"."""
    if len(token) <= 3 or not token.endswith("s") or token.endswith(("ss", "us", "is")):
        return token
    if token.endswith("ies"):
        return token[:-3] + "y"
    if token.endswith(("sses", "xes", "ches", "shes", "zes")):
        return token[:-2]
    return token[:-1]


def text_words(text: str) -> tuple[str, ...]:
    """Words of free text or of a policy phrase, plurals folded ("Used Clothes!" -> used, clothe)."""
    return tuple(singular(w) for w in words(_uncamel(text)))


def _uncamel(text: str) -> str:
    text = re.sub(r"(?<=[A-Za-z])(?=\d)|(?<=[a-z0-9])(?=[A-Z])", " ", text)  # "Transactions1h", "CVV2": split
    return re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", " ", text)


@dataclass(frozen=True)
class KeyName:
    words: frozenset[str]  # the name's meaning: filler, window and unit words removed, plurals folded
    unit: str | None  # a bare unit word in the name ("days_since_opening" -> "day")
    window_hours: float | None  # a time window in the name ("transactions_24h" -> 24.0)
    percent: bool  # the name says its value is a percentage ("outflow_pct")
    rate: bool = False  # window_hours is a rate's period ("monthly", "per_day"), not a span ("_24h")
    currency: str | None = None  # a currency code in the name ("income_eur" -> "EUR")
    counted: bool = False  # the name says its value is a count or a number, not money ("usual_payment_count")


def key_name(raw: str) -> KeyName:
    """How an attribute's name is compared with the policy's names (module docstring); cached, as upstream
    systems send the same few dozen names again and again."""
    return _key_name(raw, on("abbreviated_unit_before_ago"), on("flag_opening_name_is_a_ships_flag"),
                     on("letters_of_their_own"))


@functools.lru_cache(maxsize=4096)
def _key_name(raw: str, unit_before_ago: bool, ships_flag: bool, own_letters: bool) -> KeyName:
    # own_letters is part of the cache key only: words() reads the switch itself (policies/countries.py)
    tokens = list(words(_uncamel(raw)))
    unit: str | None = None
    window: float | None = None  # a span ("_24h", "last_hour") ...
    rate: float | None = None  # ... or a rate's period ("monthly", "per_day"), which wins: avg_monthly_cash_12m
    currency: str | None = None
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        glued = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)", t)
        if glued and singular(glued.group(2)) in _UNIT_WORDS:  # "24h", "7d", "30days"
            window = float(glued.group(1)) * UNIT_HOURS[_UNIT_WORDS[singular(glued.group(2))]]
        elif t.isdigit() and i + 1 < len(tokens) and singular(tokens[i + 1]) in _UNIT_WORDS:  # "24", "hours"
            window = float(t) * UNIT_HOURS[_UNIT_WORDS[singular(tokens[i + 1])]]
            i += 1
        elif t in _WINDOW_WORDS:
            rate = UNIT_HOURS[_WINDOW_WORDS[t]]
        elif t == "per" and i + 1 < len(tokens) and singular(tokens[i + 1]) in _UNIT_WORDS:  # "per_hour"
            rate = UNIT_HOURS[_UNIT_WORDS[singular(tokens[i + 1])]]
            i += 1
        elif t in _WINDOW_LEADS and i + 1 < len(tokens) and singular(tokens[i + 1]) in _UNIT_WORDS:  # "last_hour"
            window = UNIT_HOURS[_UNIT_WORDS[singular(tokens[i + 1])]]
            i += 1
        elif unit_before_ago and t in _UNIT_WORDS and i + 1 < len(tokens) and tokens[i + 1] in _AGO:  # "reset_min_ago", "sim_swap_h_ago"
            unit = _UNIT_WORDS[t]
        elif singular(t) in _BARE_UNITS or t in ("mins", "hrs", "yrs", "wks", "mths", "mos"):  # "min" alone is too often minimum
            unit = _UNIT_WORDS[t] if t in _UNIT_WORDS else _UNIT_WORDS[singular(t)]
        elif t in ("before", "earlier") and i > 0 and singular(tokens[i - 1]) in _BARE_UNITS:
            pass  # "payee_added_minutes_before" is "..._minutes_ago"
        elif t in CURRENCY_WORDS:
            currency = t.upper()
        elif t not in _FILLER or ships_flag and t in _MARKERS and not kept and i + 1 < len(tokens):
            kept.append(singular(t))
        i += 1
    percent = bool(_PERCENT_WORDS & set(kept))
    return KeyName(frozenset(w for w in kept if w not in _PERCENT_WORDS), unit, rate or window, percent,
                   rate is not None, currency, bool(_COUNT_WORDS.intersection(tokens)))


# ---- values -----------------------------------------------------------------------------------------
def number(value: object) -> float | None:
    """A finite number from a number or numeric text ("9,500", "9.500,00", "4.2M", "USD 750k"); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        parsed = money(value)
        return parsed[0] if parsed else None
    return None


def money(text: str) -> tuple[float, str | None] | None:
    """(amount, ISO currency or None) from text such as "$9,500", "EUR 9.500,00", "750k USD", "12%", "+310%"."""
    t = _HEDGE.sub("", text.strip().replace("\u00a0", " "))
    south_asian = on("south_asian_grouping_and_letter_currency_prefixes")
    local = _LOCAL_PREFIX.match(t) if south_asian else None
    if local:  # "KSh 950,000", "Rs 9,50,000"
        t = t[local.end():]
    span = _RANGE.fullmatch(t)
    if span:  # "9,000 - 11,000": the upper end, the most the customer said to expect
        t = span.group(2)
    currency = next((c for s, c in _SYMBOLS.items() if s in t), _LOCAL_CODES.get(local.group(1).casefold()) if local
                    else None)
    code = re.search(r"\b([A-Z]{3})\b", t)
    if code:
        currency = code.group(1)
    m = re.fullmatch(r"\s*([-+]?\d[\d,.' ]*)\s*([a-zA-Z]*)\s*", re.sub(r"\b[A-Z]{3}\b|[$€£¥₹₽₩₺%]", " ", t))
    if not m:
        return None
    digits, suffix = m.group(1).strip().replace("'", "").replace(" ", "").lstrip("+"), m.group(2).casefold()
    if suffix and (suffix not in _SCALE or not south_asian and suffix in _SOUTH_ASIAN_SCALE):
        return None
    if "," in digits and "." in digits:  # the later separator is the decimal one
        digits = digits.replace(",", "") if digits.rfind(".") > digits.rfind(",") else \
            digits.replace(".", "").replace(",", ".")
    elif "," in digits:
        grouped = re.fullmatch(r"-?\d{1,3}(,\d{3})+|-?\d{1,2}(,\d{2})*,\d{3}" if south_asian else r"-?\d{1,3}(,\d{3})+",
                               digits)  # 9,500 or 9,50,000 (lakh)
        digits = digits.replace(",", "") if grouped else digits.replace(",", ".")
    elif digits.count(".") > 1:
        digits = digits.replace(".", "")
    try:
        value = float(digits) * _SCALE.get(suffix, 1.0)
    except ValueError:
        return None
    return (value, currency) if math.isfinite(value) else None


_LEADING_AMOUNT = re.compile(r"^\s*(?:[A-Z]{3}\s*|[$€£¥₹₽₩₺]\s*)?\d[\d,.']*(?:\s*(?:k|m|mn|bn|million|billion|lakhs?|lacs?|crores?))?"
                             r"(?:\s*[A-Z]{3})?(?=\s|[,;(]|$)")


def leading_money(text: str) -> tuple[float, str | None] | None:
    """The amount a text opens with ("EUR 48,000 from German GmbH, ref ..." -> 48,000 EUR); None when it opens with
    none. Numbers further in are not read: they are references, dates or counts."""
    m = _LEADING_AMOUNT.match(text)
    return money(m.group()) if m else None


def is_percent_text(value: object) -> bool:
    return isinstance(value, str) and "%" in value


def list_numbers(value: object) -> list[int | float] | None:
    """The numbers of a list attribute ([9500, 9700]) when it holds only numbers, read as the reader
    `list_attribute_items` says (policies/risk_facts.py, risk_shape.py); None for anything else."""
    if not isinstance(value, list | tuple) or not value or not on("list_attribute_items"):
        return None
    if all(isinstance(i, int | float) and not isinstance(i, bool) for i in value):
        return list(value)
    return None


def flag(value: object) -> bool | None:
    """True/false from a boolean, a number (non-zero), or text ("yes", "Y", "added", "no match"); None if unclear."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        phrase = " ".join(words(value))
        if phrase in _TRUE:
            return True
        if phrase in _FALSE or not phrase:
            return False
        if phrase in _MORE_SAYS and on("more_yes_no_words"):
            return _MORE_SAYS[phrase]
    return None


def moment(value: object) -> datetime | None:
    """A date or time from ISO 8601 text ("2024-05-01", "2024-05-01T10:00:00Z") or common day-first or
    spelled forms ("01/05/2024", "1 May 2024", "May 1, 2024"); naive values are taken as UTC."""
    if not isinstance(value, str) or not re.search(r"\d{4}", value):
        return None
    text = re.sub(r"\s*(UTC|GMT)$", "", value.strip())
    parsed: datetime | None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed = _spelled_date(text)
    if parsed is None:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _spelled_date(text: str) -> datetime | None:
    for fmt in ("%d/%m/%Y", "%d.%m.%Y", "%Y/%m/%d", "%d-%m-%Y", "%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y",
                "%B %d %Y", "%b %d %Y", "%B %Y", "%b %Y", "%m/%d/%Y", "%Y-%m"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def elapsed(value: object, unit: str, now: datetime, name_unit: str | None) -> float | None:
    """Time elapsed, in `unit`: a number in the name's unit (else `unit`; an integer 1900-now read as a calendar
    year), text such as "3 days" or "6 months", or a date (time from it to `now`). None when unreadable or ahead."""
    hours: float | None = None
    if isinstance(value, str):
        when = moment(value)
        if when is not None:
            hours = (now - when).total_seconds() / 3600
        else:
            spelled = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)(\s+ago)?\s*", value)
            if spelled and singular(spelled.group(2).casefold()) in _UNIT_WORDS:
                hours = float(spelled.group(1)) * UNIT_HOURS[_UNIT_WORDS[singular(spelled.group(2).casefold())]]
            else:
                value = number(value)
    if hours is None:
        n = number(value)
        if n is None:
            return None
        if name_unit in (None, "year") and n == int(n) and 1900 <= n <= now.year:
            hours = (now - datetime(int(n), 7, 1, tzinfo=UTC)).total_seconds() / 3600
        else:
            hours = n * UNIT_HOURS[name_unit or unit]
    return hours / UNIT_HOURS[unit] if hours >= 0 else None


def reference_time(event_time: object) -> datetime:
    """What dates in the event are measured against: its timestamp, else now (UTC)."""
    if isinstance(event_time, datetime):
        return event_time if event_time.tzinfo else event_time.replace(tzinfo=UTC)
    if isinstance(event_time, date):
        return datetime(event_time.year, event_time.month, event_time.day, tzinfo=UTC)
    return moment(event_time) or datetime.now(UTC)


def unit_key(text: str) -> str | None:
    """The unit a word names ("years", "hrs", "d" -> year, hour, day); None when it names none."""
    return _UNIT_WORDS.get(singular(text.strip().casefold()))
