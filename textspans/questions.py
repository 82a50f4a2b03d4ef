"""What a question asks for: a figure of some kind (a date, a time of day, a period, a share, an amount, a count),
an article number, or free text. The answer's figure is then taken from the evidence in that kind: "by what date"
is answered by a whole date, never a bare year; "at what time" by a time of day ("16:00"), never the day count
beside it; "how long" by a period; "what percentage" by a share.

The noun a "what"/"which" phrase asks with decides first when it names a kind of quantity: "over what stress
horizon" asks for a period, "what number of clients" for a count, "what internal fine" for an amount, "as a
share of" for a share. A noun that only bounds a quantity ("cap", "floor", "level", "maximum") decides
nothing; then the rules below are read in order and the first that fits decides. `strict`: the question
asks for the figure outright ("what percentage", "how many days"); evidence without one means the document
does not say. A loose question ("when", "how big", "what is the minimum") may be answered in words instead.

`asked_concept` gives the words of what the question is about ("minimum credit score", "position limit",
"late submission"): the noun phrase the wh-word asks about and the phrases that restrict it, without the
words that only frame a quantity. A document that never uses one of them does not answer the question.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from textspans.figures import AMOUNT, DATE, DURATION, NUMBER, PERCENT, RATIO, TIME, find_figures


@dataclass(frozen=True)
class Asked:
    kinds: tuple[str, ...] = ()  # figure kinds that answer it, the preferred first; () when none does
    strict: bool = False  # a figure is asked for outright (see the module's note)
    article: bool = False  # which article/section holds something
    unit: str = ""  # the time unit a period is asked in ("how many business days": "day"), "" if none
    rule: str = "free"  # the rule that decided, for logs and the eval
    bound: str = ""  # "upper" or "lower": which end of a range is asked for ("the upper end", "the lowest")
    range: bool = False  # the question names a range or its end ("the upper end of the range")
    noun: str = ""  # what an article question calls the place it asks for ("Section"); "" for other questions


# name -> (kinds, strict)
_KINDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "period": ((DURATION,), True),
    "year": ((DATE, NUMBER), True),
    "date": ((DATE,), True),
    "clock": ((TIME,), True),  # "at what time", "what time of day": a time of day
    "cutoff": ((TIME, DATE, DURATION), False),  # "by what time", "the cut-off for": a time of day, else the day
    "when": ((DATE, DURATION), False),
    "share": ((PERCENT, RATIO), True),
    "multiple": ((RATIO, PERCENT, NUMBER), True),
    "amount": ((AMOUNT, NUMBER, PERCENT), True),
    "count": ((NUMBER, DURATION), True),  # "what number of days", "what age": a duration may count
    "tally": ((NUMBER,), True),  # "how many exceptions": a count of things, never a period
    "size": ((PERCENT, AMOUNT, RATIO, DURATION, NUMBER), False),
}
# The noun of a wh-phrase that names the kind of quantity asked ("what stress horizon": a period).
_HEAD_NOUNS: dict[str, str] = {
    **dict.fromkeys("horizon horizons period periods time timeframe interval intervals frequency duration window "
                    "cycle cycles lifetime tenor maturity maturities".split(), "period"),
    **dict.fromkeys("date dates day".split(), "date"),
    **dict.fromkeys("deadline latest earliest".split(), "when"),
    **dict.fromkeys("cut-off cutoff cut-offs cutoffs".split(), "cutoff"),
    "year": "year",
    **dict.fromkeys("percentage percent share proportion portion fraction rate rates ratio weight factor haircut "
                    "coefficient".split(), "share"),
    **dict.fromkeys("multiple multiplier leverage gearing".split(), "multiple"),
    **dict.fromkeys("amount sum fee fees fine fines penalty penalties value price threshold charge cost payment "
                    "turnover balance salary premium deductible volume quantity worth surcharge surcharges levy levies rent deposit "
                    "royalty toll tolls dues excess rebate discount allowance".split(), "amount"),
    **dict.fromkeys("number count age score".split(), "count"),
}
# Words that bound or place a quantity without naming its kind: they decide nothing, and they are not what
# a question is about ("the leverage ratio floor" is about the leverage ratio).
BOUND_WORDS = frozenset(
    "minimum maximum max min cap caps ceiling floor limit limits level levels size amount upper lower end range top "
    "bottom point highest lowest largest smallest longest shortest greatest least most latest earliest first last "
    "oldest youngest total overall required requirement applicable relevant permitted allowed".split())
# "the most a group may borrow", "at most how many": the bound; "the most recent" places in time, it bounds nothing.
_UPPER = re.compile(r"\b(?:upper|top|highest|maximum|max|largest|greatest|ceiling|cap|oldest)\b|\b(?:the|at) most\b"
                    r"(?!\s+(?:recent|recently|common|commonly|important|likely|senior|frequent|frequently)\b)",
                    re.IGNORECASE)
_RANGE = re.compile(r"\brange\b|\b(?:upper|lower|top|bottom) (?:end|bound)\b|\bband\b", re.IGNORECASE)
_LOWER = re.compile(r"\b(?:lower|bottom|lowest|minimum|min|smallest|floor|youngest)\b|\bthe least\b", re.IGNORECASE)

_TIME = r"(?:minutes?|hours?|days?|weeks?|months?|quarters?|years?)"
_RULES: list[tuple[str, str, str]] = [  # (rule, kind, regex)
    ("article", "", r"\b(?:which|what) (?:article|section|paragraph|part|clause|chapter|annex|regulation|rule|"
                    r"subsection|provision)s?\b"),
    # The unit a question counts in decides before any clause of its own ("... stressed when computing DSTI").
    ("share", "share", r"\bhow many (?:(?:basis|percentage) points|bps?)\b"),
    ("period", "period", rf"\bhow long\b|\bhow many (?:\w+ )?{_TIME}\b|\bwithin how\b|\bhow (?:soon|quickly|fast|often|"
                         r"frequently|far in advance|far ahead|early|late)\b|\bfor how\b|\bhow much (?:\w+ )?(?:time|notice)\b|"
                         r"\bhow many times\b(?=.*\b(?:a|an|per|every|each|in a)\s+(?:day|week|month|quarter|year|annum)\b)"),
    ("multiple", "multiple", r"\bhow many times\b"),
    # "how many overdraft fees", "how many members": a count of the thing named, whatever noun names it (a
    # period or a multiple counted is read above), so a number, not the period beside it ("no more than 6 months,
    # and no more than 3 such exceptions")
    ("count", "tally", r"\bhow many\b"),
    ("year", "year", r"\b(?:what|which) year\b"),
    # "When does the change take effect / apply from / start?": the day it starts, not a period
    ("effect", "date", r"\bwhen\b[^?]*?\b(?:take|takes|took|taking) effect\b|\bwhen\b[^?]*?\b(?:apply|applies|applied) "
                      r"from\b|\bwhen\b[^?]*?\b(?:start|starts|begin|begins|commence|commences|come|comes|came|go|"
                      r"goes|went) (?:to apply|applying|into (?:force|effect|operation)|live)\b|\bwhen\b[^?]*?\b"
                      r"(?:become|becomes|became) (?:effective|applicable|operative)\b|\bwhen\b[^?]*?\b(?:start|"
                      r"starts|begin|begins|commence|commences)\W*$"),
    ("date", "date", r"\b(?:what|which) (?:date|day)\b|\bdate\b"),
    # After the date rule: "the notice" is often the document itself ("from what date does the notice apply").
    ("period", "period", r"\bperiods?\b|\btime limit\b|\bintervals?\b|\bfrequency\b|\b(?:advance|prior|minimum) "
                         r"notice\b|\bin advance\b|\bhorizon\b"),
    ("when", "when", r"\bwhen\b|\bby when\b|\bdeadline\b|\b(?:latest|earliest)\b|\bno later than\b"),
    ("share", "share", r"\b(?:what|which) (?:\w+ )?(?:percentage|percent|per cent|share|proportion|fraction|rate|"
                       r"weight)\b|\bpercentage\b|\bper ?cent\b|\bratio\b|\brisk weight\b|\brate\b"),
    ("amount", "amount", r"\bhow much\b|\b(?:what|which) (?:\w+ )?(?:amount|sum|fee|fine|penalty|value|price|"
                         r"threshold)\b|\bamount\b|\bthreshold\b|\b(?:from|above|below|over|under|up to|exceeding|"
                         r"beyond) what\b|\bfines?\b|\bpenalt(?:y|ies)\b|\bfees?\b|\bcosts?\b|\bcharged?\b|\bworth\b"),
    ("count", "count", r"\bhow many\b|\bnumber of\b|\bhow old\b|\bwhat age\b|\bminimum age\b"),
    ("size", "size", r"\bhow (?:big|large|high|low|small)\b|\b(?:minimum|maximum|largest|smallest|highest|lowest|"
                     r"longest|shortest|at least|at most|limit|cap|ceiling|floor|requirement|upper|lower|range|level|"
                     r"size)\b"),
]
_COMPILED = [(name, kind, re.compile(rx, re.IGNORECASE)) for name, kind, rx in _RULES]
# A time of day asked outright, before the wh-phrase's noun ("what time" would otherwise ask for a period, as
# "what time limit" or "within what time" do): "at what time", "what time of day", "the cut-off time".
_CLOCK_ASKED = re.compile(r"(?<!within )(?<!\bin )\b(?:what|which) (?:time|hour)\b(?!\s+(?:limits?|periods?|frames?|"
                          r"windows?|horizons?|spans?|allowances?|budgets?)\b)|\btime of (?:the )?day\b|\bo'clock\b|"
                          r"\b(?:cut-?off|closing|opening|start|starting|finish|finishing|latest|earliest) times?\b",
                          re.IGNORECASE)
_BY_TIME = re.compile(r"\bby what time\b(?! of)", re.IGNORECASE)
# Which end of a span of hours a time question asks for ("when does the counter close": the later time)
_CLOCK_END = re.compile(r"\b(?:stops?|stopping|close|closes|closing|ends?|ending|finish|finishes|until|last)\b",
                        re.IGNORECASE)
_CLOCK_START = re.compile(r"\b(?:starts?|starting|begins?|beginning|opens?|opening|first|from)\b", re.IGNORECASE)
_AS_SHARE = re.compile(r"\bas an? (?:share|percentage|proportion|fraction|per ?cent|multiple) of\b", re.IGNORECASE)
_UNIT = re.compile(r"\bhow many (?:\w+ )?(minute|hour|day|week|month|quarter|year)s?\b", re.IGNORECASE)

# Words that end a noun phrase in a question: auxiliaries, modals, prepositions, relative words, verbs that
# questions put after their subject.
_NP_END = frozenset(
    "is are was were be been being must may might can could shall should will would do does did has have had "
    "of for on to in at by with within from under over above below after before until between during without "
    "than as against per into upon about that which who whom whose where when while whether if so and or "
    "apply applies applied make makes trigger triggers count counts need needs require requires qualify "
    "qualifies take takes cover covers deal deals set sets contain contains govern governs say says state states "
    "describe describes specify specifies define defines provide provides lay lays carry carries get gets go goes "
    "mean means refer refers regulate regulates address addresses "
    # words that relate the phrase to another, not part of it ("the MCR ceiling relative to the SCR")
    "relative relatively compared expressed measured calculated stated respectively versus vs "
    # prepositions that start another phrase ("the open FX position across all currencies")
    "across beyond through throughout via among along toward towards inside outside except like near".split())
# Past participles a suffix does not mark ("shares sold in year one"): with the -ed and -ing forms, a
# participle after a noun and before a preposition or a determiner starts a clause that restricts the noun
# ("loans secured by", "positions maturing beyond"); it names no subject of its own.
_PARTICIPLES = frozenset("sold held kept paid made given taken sent met bought lent spent built brought laid told found "
                         "written chosen known shown borne drawn put set done granted issued".split())
_DETERMINERS = frozenset("a an the its their his her this that these those each every any such our your other another".split())
_WH = re.compile(r"\b(?:what|which)\b", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9][A-Za-z0-9'-]*", text)


def _noun_phrase(words: list[str]) -> list[str]:
    """The words of the noun phrase `words` starts with (determiners skipped), up to _NP_END, a verb (a word
    after a plural noun and before a determiner: "exceptions put the model"; after a singular one it may end
    the phrase: "the cash payment a dealer may accept"), or a participle's clause."""
    out: list[str] = []
    for i, w in enumerate(words):
        low = w.casefold()
        if low in _NP_END or (out and low in _DETERMINERS):
            break
        following = words[i + 1].casefold() if i + 1 < len(words) else ""
        plural = bool(out) and out[-1].endswith("s") and not out[-1].endswith("ss")
        # "funds using swing pricing": an -ing word after a plural noun is a participle's clause, not a noun;
        # before "of" it is a noun ("the weighted average seasoning of the loans")
        if out and (plural and (following in _DETERMINERS or low.endswith("ing") and len(low) > 4)
                    or following in _NP_END and _is_participle(low) and not (following == "of" and low.endswith("ing"))):
            break
        if low not in _DETERMINERS:
            out.append(w)
    return out


def _is_participle(word: str) -> bool:
    return word in _PARTICIPLES or len(word) > 4 and (word.endswith("ed") or word.endswith("ing"))


# "What happens if X: within what time must it ...": the question after the colon is the one asked.
_SECOND_QUESTION = re.compile(r"[:;]\s+(?=(?:[\w-]+\s+){0,3}(?:what|which|how|when)\b)", re.IGNORECASE)


def asked_part(question: str) -> str:
    """The part of `question` that asks: after a colon that introduces a second wh-question, else all of it."""
    cut = list(_SECOND_QUESTION.finditer(question))
    return question[cut[-1].end():] if cut else question


def wh_phrase(question: str) -> list[str]:
    """The noun phrase a "what"/"which" question asks about: "What stress horizon ..." -> [stress, horizon];
    "What is the latest point at which ..." -> [latest, point]; [] when there is none ("How long ...")."""
    question = asked_part(question)
    m = _WH.search(question)
    if m is None:
        return []
    rest = _words(question[m.end():])
    if rest and rest[0].casefold() in {"is", "are", "was", "were"}:
        rest = rest[1:]
    return _noun_phrase(rest)


def _by_head(question: str) -> str | None:
    """The kind named by the wh-phrase's own nouns, the head (last) first; None when none names one."""
    for word in reversed(wh_phrase(question)):
        name = _HEAD_NOUNS.get(word.casefold())
        if name is not None:
            return name
    return None


# A clause that states a condition inside a what/which/how question ("... when more than a year of the term
# remains"): its "when" is a conjunction, not what is asked.
_CONDITION = re.compile(r"^(?:what|which|how)\b.*?(,?\s+\b(?:when|whenever|once|if|unless|where)\b[^?]*)",
                        re.IGNORECASE)


# A clause that states the question's case before it asks ("If I pay by the deadline, what is the most the
# discount can be worth?"): its "deadline" or "when" names the case, not what is asked.
_LEADING_CONDITION = re.compile(r"^(?:if|when|whenever|where|once|assuming|suppose|supposing|given that|in case)\b"
                                r"[^?]*?,\s*(?=(?:what|which|how)\b)", re.IGNORECASE)


# A phrase that places the question's case in time ("from the March 2026 test date onwards", "for the relevant
# period", "counted from the due date", "after the latest amendment"): a preposition, not followed by a wh-word
# ("from what date" asks), up to the next comma or the end. Its "date" or "period" is the case's, so the rules of
# time (_PLACING_RULES) are read outside it: "what minimum interest cover ratio ... from the test date" asks for
# a ratio, "by when ... counted from the due date" for the time limit.
_CASE_PHRASE = re.compile(r"\b(?:from|on|at|for|in|after|since|until|during|as (?:at|of))\s+(?!(?:what|which|when|how)\b)"
                          r"[^,;:?]*", re.IGNORECASE)
_PLACING_RULES = frozenset(("date", "period", "when"))


def asked_for(question: str, *, plain: str | None = None) -> Asked:
    """The kind of answer `question` asks for. `plain`: the question as written, when `question` carries
    extra words (the forms of the terms it names, for the rules below): the wh-phrase is read there."""
    written = plain if plain is not None else question
    if asked_part(written) != written:  # the kind is read in the question asked, not in its preamble
        question = question[len(written) - len(asked_part(written)):]
        written = asked_part(written)
    lead = _LEADING_CONDITION.match(written)
    if lead and question.startswith(written[:lead.end()]):
        question, written = question[lead.end():], written[lead.end():]
    condition = _CONDITION.search(written)
    if condition:  # "what is the cap ... when more than a year remains" asks for a cap, not a time
        question = question[:condition.start(1)] + question[condition.end(1):]
    unit = _UNIT.search(question)
    placed = _CASE_PHRASE.sub(" ", question)
    bound = "upper" if _UPPER.search(written) else "lower" if _LOWER.search(written) else ""
    name = ("share" if _AS_SHARE.search(written) else "cutoff" if _BY_TIME.search(written)
            else "clock" if _CLOCK_ASKED.search(written) else _by_head(written))
    rule = name or "free"
    if name is None:
        rule, name = next(((r, kind) for r, kind, rx in _COMPILED
                           if rx.search(placed if r in _PLACING_RULES else question)), ("free", None))
    if rule == "article":
        noun = re.search(r"\b(?:which|what) (\w+)", question, re.IGNORECASE)
        return Asked(article=True, rule=rule, noun=noun.group(1).rstrip("s").capitalize() if noun else "Article")
    if name is None:
        return Asked(bound=bound, range=bool(_RANGE.search(written)))
    kinds, strict = _KINDS[name]
    if name == "clock" and not bound:
        bound = "upper" if _CLOCK_END.search(written) else "lower" if _CLOCK_START.search(written) else ""
    return Asked(kinds=kinds, strict=strict, rule=rule,
                 unit=unit.group(1).lower() if unit and DURATION in kinds else "", bound=bound,
                 range=bool(_RANGE.search(written)))


# ---- what the question is about --------------------------------------------------------------------
# The words that frame a question rather than name its subject ("what share", "a firm", "the internal limit") are
# policy data (policies/glossary.toml `frame`), passed in by the caller; the bound words are grammar (BOUND_WORDS).
_FRAMED_OF = re.compile(r"\b(?:what|which|how many|how much)\s+(?:[\w-]+\s+){0,2}?of\s+", re.IGNORECASE)
# "how many days' notice", "how much capital": the thing counted or measured, less its unit.
_HOW_MANY = re.compile(r"\bhow (?:many|much)\s+", re.IGNORECASE)
_UNIT_WORDS = frozenset("second seconds minute minutes hour hours days weeks months quarters years times basis "
                        "points business working calendar banking trading dealing settlement clear consecutive full".split())
_RESTRICTING = re.compile(r"\b(?:applies|apply|applicable|applying)\s+(?:to|for)\s+|\b(?:for|on)\s+", re.IGNORECASE)


# "What uptime must SLAs for IBS systems guarantee?": a question whose subject follows its modal ends on its verb.
_INVERTED = re.compile(r"^(?:what|which)\b[^?]*?\b(?:must|should|may|can|shall|will|do|does|did|would|could)\b",
                       re.IGNORECASE)


def restricting_phrases(question: str) -> list[list[str]]:
    """The noun phrases after "for", "on" or "applies to" that say which case the question asks about ("for
    USD positions", "for a continuing offence"); a figure's frame is none ("for how long", "on 1 May"). A phrase
    that ends an inverted question ends before its verb ("... must SLAs for IBS systems guarantee?")."""
    out = []
    for m in _RESTRICTING.finditer(question):
        rest = _words(question[m.end():])
        if rest and not rest[0][0].isdigit() and rest[0].casefold() not in {"how", "what", "which", "whom"}:
            phrase = _noun_phrase(rest)
            last = phrase[-1] if phrase else ""
            if len(phrase) == len(rest) > 1 and last.islower() and not last.endswith("s") and _INVERTED.match(question):
                phrase = phrase[:-1]
            out.append(phrase)
    return out


def frame_words(frame: Iterable[str]) -> frozenset[str]:
    """The words that frame a question: the bound words and `frame` (lower-case words, the glossary's)."""
    return BOUND_WORDS | frozenset(frame)


def asked_concept(question: str, frame: frozenset[str]) -> list[str]:
    """The words naming what `question` is about: the wh-phrase's and those of each phrase after "for", "on"
    or "applies to", less the words that frame a quantity or an actor (`frame`, from `frame_words`) and periods
    written in words ("the three-year rate"). A phrase that starts with a number or "how"/"what" is a figure's
    frame, not a subject ("for how long", "on 1 May")."""
    phrases = [wh_phrase(question)]
    # "what share of X", "how many years of X": a frame's "of" names the subject
    framed = _FRAMED_OF.search(question)
    if framed and all(w.casefold() in frame for w in phrases[0]):
        phrases.append(_noun_phrase(_words(question[framed.end():])))
    counted = _HOW_MANY.search(question)
    if counted:
        phrases.append([w for w in _noun_phrase([w.rstrip("'") for w in _words(question[counted.end():])])
                        if w.casefold() not in _UNIT_WORDS])
    phrases.extend(restricting_phrases(question))
    out: list[str] = []
    for phrase in phrases:
        words = (re.sub(r"'s$", "", w) for w in phrase)
        out.extend(w for w in words if w.casefold() not in frame and w.casefold().replace("-", "") not in frame
                   and not w[0].isdigit() and len(w) > 2 and not is_period_word(w))
    return list(dict.fromkeys(out))


def is_period_word(word: str) -> bool:
    """`word` is wholly a period written in words ("three-year", "one-year", "six-month"): a figure, the case
    a question states, never a subject a document must write in those words."""
    found = find_figures(word, words=True)
    return len(found) == 1 and found[0].kind == DURATION and found[0].start == 0 and found[0].end == len(word)
