"""What a question asks for: a figure of some kind (a date, a period, a share, an amount, a count), an article
number, or free text. The answer's figure is then taken from the evidence in that kind: "by what date" is
answered by a whole date, never a bare year; "how long" by a period; "what percentage" by a share.

The rules are read in order and the first that fits decides. `strict`: the question asks for the figure
outright ("what percentage", "how many days"); evidence without one means the document does not say.
A loose question ("when", "how big", "what is the minimum") may be answered in words instead.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from textspans.figures import AMOUNT, DATE, DURATION, NUMBER, PERCENT, RATIO


@dataclass(frozen=True)
class Asked:
    kinds: tuple[str, ...] = ()  # figure kinds that answer it, the preferred first; () when none does
    strict: bool = False  # a figure is asked for outright (see the module's note)
    article: bool = False  # which article/section holds something
    unit: str = ""  # the time unit a period is asked in ("how many business days": "day"), "" if none
    rule: str = "free"  # the rule that decided, for logs and the eval


_TIME = r"(?:minutes?|hours?|days?|weeks?|months?|quarters?|years?)"
_RULES: list[tuple[str, str, tuple[str, ...], bool]] = [
    ("article", r"\b(?:which|what) (?:article|section|paragraph|part|clause|chapter|annex)\b", (), False),
    ("period", rf"\bhow long\b|\bhow many (?:\w+ )?{_TIME}\b|\bwithin how\b|\bhow (?:soon|quickly|often|frequently|"
               r"far in advance|early|late)\b|\bfor how\b|\bhow much (?:\w+ )?(?:time|notice)\b|\bhow many times\b",
     (DURATION,), True),
    ("year", r"\b(?:what|which) year\b", (DATE, NUMBER), True),
    ("date", r"\b(?:what|which) (?:date|day)\b|\bby when\b|\bdate\b", (DATE,), True),
    # After the date rule: "the notice" is often the document itself ("from what date does the notice apply").
    ("period", r"\bperiods?\b|\btime limit\b|\bintervals?\b|\bfrequency\b|\b(?:advance|prior|minimum) notice\b|"
               r"\bin advance\b", (DURATION,), True),
    ("when", r"\bwhen\b|\bdeadline\b", (DATE, DURATION), False),
    ("share", r"\b(?:what|which) (?:\w+ )?(?:percentage|percent|per cent|share|proportion|fraction|rate|weight)\b|"
              r"\bpercentage\b|\bper ?cent\b|\bratio\b|\brisk weight\b|\brate\b", (PERCENT, RATIO), True),
    ("amount", r"\bhow much\b|\b(?:what|which) (?:\w+ )?(?:amount|sum|fee|fine|penalty|value|price|threshold)\b|"
               r"\bamount\b|\bthreshold\b|\b(?:from|above|below|over|under|up to|exceeding|beyond) what\b|"
               r"\bfines?\b|\bpenalt(?:y|ies)\b|\bfees?\b",
     (AMOUNT, NUMBER, PERCENT), True),
    ("count", r"\bhow many\b|\bnumber of\b|\bhow old\b|\bwhat age\b|\bminimum age\b", (NUMBER, DURATION), True),
    ("size", r"\bhow (?:big|large|high|low|small)\b|\b(?:minimum|maximum|largest|smallest|highest|lowest|longest|"
             r"shortest|at least|at most|limit|cap|ceiling|floor|requirement)\b",
     (PERCENT, AMOUNT, RATIO, DURATION, NUMBER), False),
]
_COMPILED = [(name, re.compile(rx, re.IGNORECASE), kinds, strict) for name, rx, kinds, strict in _RULES]
_UNIT = re.compile(r"\bhow many (?:\w+ )?(minute|hour|day|week|month|quarter|year)s?\b", re.IGNORECASE)


def asked_for(question: str) -> Asked:
    """The kind of answer `question` asks for (the first rule that fits)."""
    unit = _UNIT.search(question)
    for name, rx, kinds, strict in _COMPILED:
        if rx.search(question):
            return Asked(kinds=kinds, strict=strict, article=name == "article", rule=name,
                         unit=unit.group(1).lower() if unit and DURATION in kinds else "")
    return Asked()
