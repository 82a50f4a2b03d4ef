"""A sentence whose figure a later one replaces: which sentence answers a question about the figure in force.

Within one sentence, textspans/supersession.py pairs an old figure with its new one. Across sentences a document
says it in two ways: a proposal that the final text replaced ("We proposed ... 6% of the pot value." then "The
final rule sets the trigger at 8% ...") and a figure kept until a change applies ("Until 28 February 2027 the
maximum ... remains €415,000." beside the rule that will say €85,000). A question for the new figure ("now",
"once the amendments are in force") is answered by the other sentence; one with no marker too where the old
sentence is a superseded proposal (the final rule is in force), not where it is a figure kept until a date
(that one is in force until then). A question that asks for the proposal or the old figure keeps it.
"""
from __future__ import annotations

import re

from gateway.domain.retrieval import Candidate, DocumentIndex
from textspans.supersession import NEW, OLD, version_asked

# A proposal the document reports as made before (consultation feedback), not one it makes.
_PROPOSED = re.compile(r"\b(?:we|it|they|the (?:consultation|paper|draft|regulator|authority|CP))\s+(?:had\s+)?"
                       r"(?:originally\s+)?proposed\b|\b(?:was|were|had been|originally)\s+proposed\b|"
                       r"\bpreviously\b|\bformerly\b", re.IGNORECASE)
# A figure kept until a change applies: "Until 28 February 2027 ... remains €415,000", "continues to apply until".
_KEPT = re.compile(r"\buntil\b[^.;]*\b(?:remains?|continues?|stays?|applies)\b|\b(?:remains?|continues? to apply|"
                   r"stays?)\b[^.;]*\buntil\b|\bas it stood before\b", re.IGNORECASE)
NEIGHBOURS = 3  # sentences after a superseded one searched for the one that replaces it, in its section


def superseded(sentence: str, question: str) -> bool:
    """`sentence` states a figure that `question` does not ask for because another replaces it."""
    asked = version_asked(question)
    if asked == OLD or re.search(r"\bpropos", question, re.IGNORECASE):
        return False
    return bool(_PROPOSED.search(sentence)) or asked == NEW and bool(_KEPT.search(sentence))


def replacing(index: DocumentIndex, ranked: list[Candidate], chosen: Candidate, kinds: tuple[str, ...],
              question: str) -> Candidate | None:
    """The sentence that replaces `chosen` for `question` (one of `ranked` or the NEIGHBOURS after it in its
    section, stating a figure of `kinds`, itself not superseded), or None when `chosen` answers or none does."""
    if not superseded(chosen.sentence, question):
        return None
    others = []
    at = index.sentences.index(chosen.sentence) if chosen.sentence in index.sentences else len(index.sentences)
    for i in range(at + 1, min(at + 1 + NEIGHBOURS, len(index.sentences))):
        if index.places[i].section == index.places[at].section:
            others.append(index.line(i))
    for c in others + [c for c in ranked if c.sentence != chosen.sentence]:
        if any(f.kind in kinds for f in c.figures) and not superseded(c.sentence, question):
            return c
    return None

