"""Values as contracts write them -> values as a schema wants them, done by code rather than the model.

This module holds the choice between candidates (context cues) and the yes/no facts (renewal clauses,
cue stems); the candidates themselves are found in contracts/amounts.py (money) and contracts/dates.py (dates, terms).

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

import re
from collections.abc import Callable
from dataclasses import dataclass


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
