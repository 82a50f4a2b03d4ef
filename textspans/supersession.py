"""Figures that replace others: which of an old and a new figure a question asks for.

A document states a change in a few ways, each pairing the figure it replaces with the one that replaces it:
amending text ('for "15 years" substitute "10 years"', "is replaced by", "deleted and replaced with", "increased
from 30 days to 45 days", '"USD 95" shall read "USD 110"'), a new figure with its old one beside it ("45 days (previously 30 days)", "45 days, up
from 30 days", "10 June, not 3 June" in a correction), and a table with current and proposed columns (read by
the caller from the header's cells, `column_version`). A question then asks for one side: "now", "new",
"amended", "after the change", "proposed", "revised" the new figure; "before the change", "existing",
"previously", "old", "was" the old one ("current" too where the new side is only proposed). A question with
no marker asks for the figure in force: the new one of an amendment or correction, the current one beside a
proposal.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from textspans.figures import CHANGE_STEMS, DATE_PATTERN, Figure

NEW, OLD = "new", "old"

# What names a change: "before the side letter", "prior to Rate-Change Notice 2026/03", "after the February 2026
# variation", "following the corrigendum".
_CHANGE_NOUN = (r"(?:[\w'\u2019/.,-]+\s+){0,4}?(?:\w+-)?(?:changes?|amendments?|variations?|revisions?|updates?|"
                r"reforms?|proposals?|renewals?|regulations|side letters?|letters?|notices?|corrigend(?:um|a)|"
                r"addend(?:um|a)|resolutions?|circulars?|memo(?:randum)?s?|increases?|decreases?|reductions?|cuts?|"
                r"rises?|repricing|reviews?|supplements?|endorsements?|riders?|restatements?|deeds?|agms?|"
                r"e-?mails?|notifications?|decisions?|instructions?)\b")
_OLD_ASKED = re.compile(rf"\b(?:before|prior to|until|ahead of|preceding)\s+{_CHANGE_NOUN}|"
                        rf"\b(?:before|prior to)\s+(?:{DATE_PATTERN})|"
                        r"\bprevious(?:ly)?\b|\bformer(?:ly)?\b|\bold\b|\bexisting\b|"
                        r"\boriginal(?:ly)?\b|\bwas\b|\bwere\b|\bused to\b|\buntil now\b|\bpre-(?:amendment|change)\b|"
                        r"\bunamended\b|\bas it stood\b|\bhad been\b", re.IGNORECASE)
_NEW_ASKED = re.compile(r"\bnow\b|\bnew\b|\bamend(?:ed|ment|ments|ing)\b|\brevised\b|\bpropos(?:ed|al|es)\b|"
                        rf"\b(?:after|following|under)\s+{_CHANGE_NOUN}|\bin force\b|\bupdated\b|"
                        rf"\b(?:since|from|as (?:of|from)|with effect from|effective(?: from)?)\s+(?:{DATE_PATTERN})|"
                        r"\bcorrect(?:ed)?\b|\bgoing forward\b|\brecommended\b|\bfrom now\b", re.IGNORECASE)
# "current" names the figure in force: the old one only where the new one is a proposal beside it.
_CURRENT_ASKED = re.compile(r"\b(?:current(?:ly)?|present(?:ly)?|today|at the moment)\b(?!\s+accounts?\b)",
                            re.IGNORECASE)

# A column's header that says which side its figures are.
# A header is a side's only where its other words name no segment ("New customers" is not a version):
# its words are the side's and at most one word naming what the column holds.
_OLD_COLUMN = re.compile(r"^(?:current|existing|old|previous|unamended|original)$", re.IGNORECASE)
_NEW_COLUMN = re.compile(r"^(?:proposed|new|revised|amended|updated|recommended|corrected)$", re.IGNORECASE)
_HOLDS = frozenset("limit limits rate rates value values figure figures level levels amount amounts fee fees "
                   "terms rule rules requirement position regime tariff pricing".split())
_PROPOSAL = re.compile(r"\b(?:propos\w*|recommend\w*|consult\w*|draft)\b", re.IGNORECASE)

# (pattern, its group holding the old figures, its group holding the new ones)
_SPANS = [
    # 'for "15 years" substitute "10 years"'
    re.compile(r"\bfor\b(?P<old>[^;]{0,160}?)\bsubstitute\b(?P<new>[^;]{0,160})", re.IGNORECASE),
    # "replace 30 days with 45 days", "substitute ... by ..."
    re.compile(r"\b(?:replace|substitute)\b(?P<old>[^;.]{0,160}?)\b(?:with|by)\b(?P<new>[^;]{0,160})", re.IGNORECASE),
    # "the figure of 30 days is deleted and replaced with 45 days"
    re.compile(r"(?P<old>[^;]{0,160}?)\b(?:is|are|shall be|will be|has been|have been|be|was|were)\s+"
               r"(?:(?:deleted|omitted|struck out|removed)\s+and\s+)?(?:replaced|substituted|superseded)\s+"
               r"(?:by|with)\b(?P<new>[^;]{0,160})", re.IGNORECASE),
    # 'amended by deleting "30 days" and replacing it with "45 days"', "omitting 30 days and inserting 45 days"
    re.compile(r"\b(?:delet|omit|strik)\w*(?:\s+out)?\b(?P<old>[^;]{0,160}?)\band\s+(?:replac|substitut|insert)\w*"
               r"(?:\s+(?:it|them|therefor|in (?:its|their) place))?(?:\s+(?:with|by))?\b(?P<new>[^;]{0,160})",
               re.IGNORECASE),
    # a corrigendum's or amendment's formula: 'the rate "0.80 bp" shall read "0.70 bp"', "is amended to read"
    re.compile(r"(?P<old>[^;]{0,160}?)\b(?:shall|should|is to|are to|(?:is|are) amended to) (?:now )?read\b"
               r"(?P<new>[^;]{0,160})", re.IGNORECASE),
    # "increased from 30 days to 45 days", "the fee goes from GBP 5 to GBP 7"
    re.compile(rf"\b(?:{CHANGE_STEMS}|lower|cut|mov|rise|ris|rose|fall|fell|go|went|halv|doubl|brought|bring|updat|"
               r"reset|shift|push)\w*\b[^.;]{0,60}?\bfrom\b(?P<old>[^;]{0,60}?)\bto\b(?P<new>[^;]{0,80})",
               re.IGNORECASE),
]
# Between a new figure and the old one written after it: "45 days (previously 30 days)", "45 days, up from 30
# days", "GBP 50, not GBP 75", "45 days instead of 30 days", the new figure's unit first ("GBP 509/m (previously
# GBP 498/m)", "8.2% p.a., up from 7.9%").
_NEW_THEN_OLD = re.compile(r"^(?:/\s?[a-z]\w*\.?|\s*p\.a\.|\s+per\s+[a-z]+)?[\s,;(\u2013\u2014-]*(?:(?:up|down|increased|reduced|raised|lowered|changed|"
                           r"extended|shortened|cut)\s+from|previously|formerly|was|were|instead of|rather than|"
                           r"replacing|not|in place of|compared with|against|vs\.?|versus)\s+"
                           r"(?:(?:the|a|an|its|of)\s+)?$", re.IGNORECASE)
# The same in brackets after a few words that say what the new figure is of: "1.5x standard (previously 2.0x)",
# "three months before the arrangement takes effect (previously six weeks)".
_NEW_WORDS_THEN_OLD = re.compile(r"^(?:\s+[^\s\d,;:.()]+){1,6}\s*\(\s*(?:previously|formerly|was|were|up from|"
                                 r"down from)\s+(?:(?:the|a|an)\s+)?$", re.IGNORECASE)
# A correction's figure after "should read" / "should be", where the sentence says it corrects.
_CORRECTS = re.compile(r"\b(?:correct\w*|typo|error|mistake|wrong|erroneous|incorrect\w*|misstated)\b", re.IGNORECASE)
_SHOULD = re.compile(r"(?P<old>.{0,200}?)\bshould (?:read|be|have read|have been|say|have said)\b(?P<new>.{0,160})",
                     re.IGNORECASE | re.DOTALL)


def version_asked(question: str, *, proposal: bool = False) -> str:
    """NEW, OLD or "" (no marker): the side of a change `question` asks for. `proposal`: the new side is only
    proposed, so "current" asks for the old one."""
    if _OLD_ASKED.search(question) or proposal and _CURRENT_ASKED.search(question):
        return OLD
    return NEW if _NEW_ASKED.search(question) else ""


def is_proposal(text: str) -> bool:
    """`text` (a sentence with its line and header) proposes its new figures rather than making them law."""
    return bool(_PROPOSAL.search(text))


def column_version(header_cell: str) -> str:
    """The side a table column's figures are by its header's words ("Current": OLD; "Proposed": NEW), or ""."""
    words = re.findall(r"[A-Za-z]+", re.sub(r"\([^)]*\)", " ", header_cell))
    sides = {OLD if _OLD_COLUMN.match(w) else NEW for w in words if _OLD_COLUMN.match(w) or _NEW_COLUMN.match(w)}
    rest = [w for w in words if not (_OLD_COLUMN.match(w) or _NEW_COLUMN.match(w))]
    if len(sides) != 1 or len(rest) > 1 or rest and rest[0].casefold() not in _HOLDS:
        return ""
    return sides.pop()


def is_version_word(word: str) -> bool:
    """`word` alone marks a side of a change ("existing", "amended", "now"): it says which figure, not what about."""
    return bool(_OLD_ASKED.fullmatch(word) or _NEW_ASKED.fullmatch(word) or _CURRENT_ASKED.fullmatch(word))


def versions(sentence: str, figures: Sequence[Figure]) -> list[str]:
    """Per figure of `sentence` (offsets in it): OLD or NEW where the sentence states a change of it, else ""."""
    out = [""] * len(figures)

    def mark(start: int, end: int, side: str, first_only: bool = False) -> None:
        inside = [i for i, f in enumerate(figures) if start <= f.start < end]
        for i in inside[:1] if first_only else inside:
            out[i] = out[i] or side

    for rx in _SPANS:
        for m in rx.finditer(sentence):
            if any(m.start("old") <= f.start < m.end("old") for f in figures):
                mark(*m.span("old"), OLD)
                mark(*m.span("new"), NEW, first_only=True)
    if _CORRECTS.search(sentence):
        for m in _SHOULD.finditer(sentence):
            if any(m.start("new") <= f.start < m.end("new") for f in figures):
                mark(*m.span("old"), OLD)
                mark(*m.span("new"), NEW, first_only=True)
    for i in range(1, len(figures)):
        a, b = figures[i - 1], figures[i]
        between = sentence[a.end:b.start]
        if a.kind == b.kind and (_NEW_THEN_OLD.match(between) or _NEW_WORDS_THEN_OLD.match(between)):
            out[i - 1], out[i] = out[i - 1] or NEW, out[i] or OLD
    return out


def in_version(figures: Sequence[Figure], marks: Sequence[str], asked: str, *, proposal: bool = False,
               ) -> list[Figure]:
    """The figures of the side asked (`asked`: NEW, OLD or "": the side in force, the new one unless `proposal`)
    and those no change marks; all of them when no figure is marked or none is of that side."""
    if not any(marks):
        return list(figures)
    side = asked or (OLD if proposal else NEW)
    kept = [f for f, m in zip(figures, marks, strict=True) if m in ("", side)]
    return kept if any(m == side for m in marks) else list(figures)
