"""What code offers a field of one contract: the candidate spans, names and values the grammar lets the model
choose from, best first, and how a chosen span converts to the schema's value (jobs/extraction.py plans with
them). Numbers, dates and terms come from contracts/amounts.py and contracts/dates.py, names from contracts/names.py, the
choice between candidates and yes/no facts from contracts/normalize.py.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tokenizers

from contracts import amounts, dates, names, normalize
from contracts.field_schema import AVOID, CUE, EXCLUDE, SYNONYMS, base_type, plain_field
from contracts.names import OwnNames
from engine.structured import writable
from textspans import text_spans

# True when the model can write the text as a JSON string's content (engine.structured.writable with its tokenizer).
Writable = Callable[[str], bool]


def writable_only(options: list[str], can_write: Writable | None) -> list[str]:
    """The options the model can write, best first still. A candidate is an enum value: the grammar forces its
    rest once its start is chosen, and the gateway refuses a schema with a value the vocabulary cannot write
    (a byte no token holds, such as U+40000..U+BFFFF for SmolLM2, or a special token's text like
    "<|im_end|>"), so such a span of the contract is simply not offered. None: no filter (no tokenizer here)."""
    return options if can_write is None else [o for o in options if can_write(o)]


def model_writable(model_folder: Path) -> Writable | None:
    """`writable` with the tokenizer of the model in `model_folder` (a worker's FINSERVE_MODEL, the folder the
    gateway serves), or None when this machine has no copy of it. Only tokenizer.json is read."""
    path = model_folder / "tokenizer.json"
    if not path.is_file():
        return None
    return functools.partial(writable, tokenizers.Tokenizer.from_file(str(path)))


def value_options(kind: str, field: dict[str, Any], text: str) -> list[str]:
    """The spans a number, date or duration field may take, best first; one when code can tell."""
    cues = {"amount": normalize.AMOUNT_CUES, "date": normalize.DATE_CUES}.get(kind, normalize.TERM_CUES)
    spans = [s for s in SPANS[kind](text) if _readable(kind, s) and _within_bounds(field, kind, s)]
    spans = normalize.not_near(spans, text, field.get(AVOID, []))
    ranked = normalize.rank_by_context(spans, text, cues, key=lambda s: _span_key(kind, s))
    return ranked[:1] if normalize.decided(ranked, text, cues) else ranked


def _span_key(kind: str, span: str) -> object:
    if kind == "amount":
        return (amounts.parse_amount(span), amounts.currency_of(span))
    if kind in ("month", "year") and dates.is_end_date(span):
        return ("until", dates.end_date_of(span))
    return convert(kind, span)


def _readable(kind: str, span: str) -> bool:
    if kind in ("month", "year") and dates.is_end_date(span):
        return dates.end_date_of(span) is not None
    return convert(kind, span) is not None


def _within_bounds(field: dict[str, Any], kind: str, span: str) -> bool:
    value = convert(kind, span)
    if not isinstance(value, (int, float)):
        return True
    if "minimum" in field and value < field["minimum"] or "maximum" in field and value > field["maximum"]:
        return False
    return not ("exclusiveMinimum" in field and value <= field["exclusiveMinimum"]
                or "exclusiveMaximum" in field and value >= field["exclusiveMaximum"])


_NAME_WORDS = re.compile(r"\b(?:name|party|parties|counterpart\w*|company|entity|lender|borrower|lessor|lessee|"
                         r"supplier|customer|client|vendor|buyer|seller|provider|contractor|licensor|licensee|"
                         r"issuer|guarantor|obligor|bank|dealer|purchaser|tenant|landlord)\b", re.IGNORECASE)


def is_name_field(name: str, field: dict[str, Any]) -> bool:
    """A free string field about a party or a name (by its name or description), e.g. "counterparty"."""
    if base_type(field) != "string" or "enum" in field or "format" in field:
        return False
    return _NAME_WORDS.search(f"{name.replace('_', ' ')} {field.get('description', '')}") is not None


def name_options(field: dict[str, Any], text: str, ours: OwnNames) -> list[str]:
    """Legal-entity names of the contract a name field may take, never ours, those in a party position
    first; only that one when exactly one other party stands in a party position. The field's own
    `pattern`, if it has one, is applied as written."""
    max_chars = int(field.get("maxLength", 120))
    found = [c for c in names.candidates(text) if not ours.is_ours(c.span) and len(c.span) <= max_chars
             and len(c.span) >= int(field.get("minLength", 0))]
    if "pattern" in field:
        found = [c for c in found if re.search(field["pattern"], c.span)]
    party = [c.span for c in found if c.party]
    if len(party) == 1:
        return party
    return _dedupe_case(party + [c.span for c in found if not c.party])


def _dedupe_case(spans: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for s in spans:
        seen.setdefault(names.canonical(s), s)
    return list(seen.values())


def grounded_candidates(field: dict[str, Any], text: str, ours: OwnNames | None = None) -> list[str]:
    """The spans of `text` an x-grounded field may take: matching its pattern, never an excluded name.

    With a pattern only the longest matches are kept: "Energy GmbH" inside "Kestrel Energy GmbH" is
    the tail of a name, not a name. Our own names (the job's and `x-exclude`, any case or spelling,
    affiliates included) and every span inside them go, so a counterparty is never ourselves. A name
    field (`is_name_field`) is offered the names found in the text instead (`name_options`).
    """
    ours = ours if ours is not None else OwnNames(field.get(EXCLUDE, []))
    if is_name_field("", field):
        return name_options(field, text, ours)
    spans = text_spans(text, max_chars=int(field.get("maxLength", 80)))
    if "pattern" in field:
        spans = [s for s in spans if re.search(field["pattern"], s)]
        spans = [s for s in spans if not any(s != o and s in o for o in spans)]
    return [s for s in spans if not ours.is_ours(s) and len(s) >= int(field.get("minLength", 0))]


def fallback_spans(field: dict[str, Any], text: str, ours: OwnNames) -> list[str]:
    """When no candidate fits: any span of the contract (the field's pattern and length still apply), never
    ours. Unconstrained but grounded: the grammar can still write the true value, never an invented one."""
    spans = text_spans(text, max_chars=int(field.get("maxLength", 80)))
    if "pattern" in field:
        spans = [s for s in spans if re.search(field["pattern"], s)]
    return [s for s in spans if not ours.is_ours(s) and len(s) >= int(field.get("minLength", 0))]


def is_renewal(name: str, field: dict[str, Any]) -> bool:
    words = f"{name} {field.get('description', '')} {field.get(CUE, '')}"
    return re.search(r"renew", words, re.IGNORECASE) is not None


def boolean_value(name: str, field: dict[str, Any], text: str) -> bool | None:
    """A yes/no field code can read: a renewal clause (`renewal_value`; a contract without one does not
    renew automatically), or the mentions of an `x-cue` stem; None leaves it to the model."""
    if is_renewal(name, field):
        value = normalize.renewal_value(text)
        if value is None and not normalize.mentions_renewal(text):
            return False
        return value
    if CUE in field:
        return normalize.cue_value(field[CUE], text)
    return None


# What values of an enum are called in contracts: code's knowledge, merged with a field's x-synonyms.
_THESAURUS: dict[str, list[str]] = {
    "loan": ["loan", "credit agreement", "credit facility", "facility agreement", "term facility",
             "revolving facility", "borrowing", "promissory note"],
    "lease": ["lease", "leasing", "rental", "hire agreement", "tenancy"],
    "swap": ["swap", "isda"],
    "service": ["service", "services", "consultancy", "consulting", "outsourcing", "maintenance", "support agreement",
                "sla"],
    "supply": ["supply", "purchase agreement", "purchase contract", "procurement", "sale of goods", "offtake"],
    "nda": ["nda", "non-disclosure", "nondisclosure", "confidentiality", "secrecy"],
}


def _enum_words(field: dict[str, Any], value: Any) -> list[str]:
    words = [str(value), *field.get(SYNONYMS, {}).get(value, [])]
    if isinstance(value, str):
        words += _THESAURUS.get(value.casefold(), [])
        words += amounts.currency_words(value)
    return words


def _mentions(words: list[str], text: str) -> bool:
    # (?<!\w) rather than \b: a synonym may be a symbol ("€"), before which \b never matches.
    return any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)" if w[-1:].isalnum() else rf"(?<!\w){re.escape(w)}",
                         text, re.IGNORECASE) for w in words)


def enum_options(field: dict[str, Any], text: str, amount_options: list[str]) -> dict[str, Any]:
    """A string enum narrowed by code: to the currency of the amount (when the field's values are
    currency codes and every amount candidate is in one of them), to the one value the title names,
    or to the values the text mentions (as words, synonyms or symbols, any case) when it mentions any."""
    values = field["enum"]
    narrowed = plain_field(field)
    if not all(isinstance(v, str) for v in values):
        return narrowed
    currencies = {amounts.currency_of(s) for s in amount_options}
    if len(currencies) == 1 and (only := currencies.pop()) in values:
        return {**narrowed, "enum": [only]}
    title = _title(text)
    named = [v for v in values if _mentions(_enum_words(field, v), title)]
    if len(named) == 1:
        return {**narrowed, "enum": named}
    mentioned = [v for v in values if _mentions(_enum_words(field, v), text)]
    return {**narrowed, "enum": mentioned} if mentioned else narrowed


def _title(text: str) -> str:
    """The contract's title: its first non-empty line, if short; else its first sentence."""
    for line in text.splitlines():
        if line.strip():
            first = line.strip()
            return first if len(first) <= 120 else re.split(r"(?<=[.;])\s", first)[0]
    return ""


def conversion_of(name: str, field: dict[str, Any]) -> str | None:
    if "enum" in field:
        return None
    kind = base_type(field)
    if kind == "number":
        return "amount"
    if kind == "string" and field.get("format") == "date":
        return "date"
    if kind == "integer":
        return dates.duration_unit(name, str(field.get("description", "")))
    if is_name_field(name, field):
        return "name"
    return None


def convert(kind: str, span: str) -> Any:
    if kind == "amount":
        return amounts.parse_amount(span)
    if kind == "date":
        return dates.parse_date(span)
    return dates.parse_duration(span, kind)


SPANS = {"amount": amounts.amount_spans, "date": dates.date_spans, "month": dates.term_spans,
          "year": dates.term_spans}
