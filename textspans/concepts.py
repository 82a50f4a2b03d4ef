"""Domain concepts in text: the forms one concept is written in ("CET1", "common equity tier 1") found as one
term, and the abbreviations a document defines for itself ("net stable funding ratio (NSFR)").

A form written in capitals (an abbreviation: "CET1", "G-SII") is matched as written, so "PEP" is not "pep";
any other form ignores case. Hyphens and spaces are the same ("risk-weighted" = "risk weighted"), and a
trailing plural "s" is allowed. Where forms overlap the longest wins ("common equity tier 1" before "tier 1").
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def is_abbreviation(form: str) -> bool:
    """A form matched case-sensitively: no lower-case letter and at least two capitals ("CET1", "G-SII")."""
    return not any(c.islower() for c in form) and sum(c.isupper() for c in form) >= 2


def _key(form: str) -> str:
    return re.sub(r"[\s-]+", " ", form.strip()).casefold()


def _regex(form: str) -> str:
    body = r"[\s-]+".join(re.escape(w) for w in re.split(r"[\s-]+", form.strip()) if w)
    if is_abbreviation(form):
        return body + r"(?:s|'s)?"  # as written: "PEPs", "SAR's"
    return f"(?i:{body}(?:s|es)?)"


@dataclass(frozen=True)
class ConceptIndex:
    """Concepts, each a group of forms; `find` returns (start, end, concept id) for each mention in a text.

    The concept id is the group's first form, so it reads in debugging output ("CET1").
    """

    groups: tuple[tuple[str, ...], ...]
    _ids: dict[str, str] = field(init=False, repr=False, compare=False)
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids: dict[str, str] = {}
        for group in self.groups:
            for form in group:
                ids.setdefault(_key(form), group[0])
        forms = sorted({f for g in self.groups for f in g if f.strip()}, key=lambda f: -len(f))
        regex = "|".join(_regex(f) for f in forms)
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_pattern", re.compile(rf"(?<![\w-])(?:{regex})(?![\w-])") if forms else None)

    def find(self, text: str) -> list[tuple[int, int, str]]:
        if self._pattern is None:
            return []
        out = []
        for m in self._pattern.finditer(text):
            concept = self._id_of(m.group(0))
            if concept is not None:
                out.append((m.start(), m.end(), concept))
        return out

    def _id_of(self, written: str) -> str | None:
        key = _key(written)
        for candidate in (key, re.sub(r"'s$", "", key), re.sub(r"es$", "", key), re.sub(r"s$", "", key)):
            if candidate in self._ids:
                return self._ids[candidate]
        return None

    def forms_of(self, concept: str) -> tuple[str, ...]:
        """Every form of the concept whose id is `concept` (none for an unknown id)."""
        return next((g for g in self.groups if g[0] == concept), ())

    def with_groups(self, extra: Iterable[Sequence[str]]) -> ConceptIndex:
        """This index plus `extra` groups; a group sharing a form with an existing concept joins that concept."""
        extra = list(extra)
        if not extra:
            return self
        groups = [list(g) for g in self.groups]
        for new in extra:
            home = next((g for g in groups if {_key(f) for f in g} & {_key(f) for f in new}), None)
            if home is None:
                groups.append(list(new))
            else:
                home.extend(f for f in new if _key(f) not in {_key(x) for x in home})
        return ConceptIndex(tuple(tuple(g) for g in groups))


_DEFINED = re.compile(r"\(\s*(?:the\s+)?[\"“']?([A-Z][A-Za-z0-9&-]{1,11})[\"”']?\s*\)")
_SMALL_WORDS = frozenset("of and for the to in on at by with a an".split())


def defined_abbreviations(text: str) -> list[tuple[str, str]]:
    """(abbreviation, long form) pairs a text defines as "long form (ABBR)", e.g. ("NSFR", "net stable funding
    ratio"). The long form is the shortest run of words before the bracket whose initials spell the
    abbreviation in order (Schwartz and Hearst's rule: each letter found in a word, the first letter starting
    the first word); small words ("of", "and") may sit inside it."""
    out: dict[str, str] = {}
    for m in _DEFINED.finditer(text):
        abbr = m.group(1)[:-1] if m.group(1).endswith("s") else m.group(1)  # "G-SIIs"
        letters = [c.casefold() for c in abbr if c.isalnum()]
        if not is_abbreviation(abbr) or len(letters) < 2:
            continue
        # Words with their inner apostrophes and hyphens, less the quotes around a defined term ("'leverage
        # ratio exposure measure' (LREM)").
        before = re.findall(r"\w+(?:['-]\w+)*", text[max(0, m.start() - 200):m.start()])
        long_form = _long_form(letters, before[-(len(letters) + 5):])
        if long_form:
            out.setdefault(abbr, long_form)
    return list(out.items())


def _long_form(letters: list[str], words: list[str]) -> str | None:
    for n in range(1, len(words) + 1):
        run = words[-n:]
        if run[0].casefold() in _SMALL_WORDS or run[0][0].casefold() != letters[0]:
            continue
        if _spells(letters, run):
            return " ".join(run)
    return None


def _spells(letters: list[str], words: list[str]) -> bool:
    """The words' initials give the letters in order (a hyphenated word one per part); small words and up to
    two others ("own funds" in "minimum requirement for own funds and eligible liabilities") may give none,
    but the first and the last word each give one."""
    parts = [p for w in words for p in w.split("-") if p and p.casefold() not in _SMALL_WORDS]
    i, skipped, last_used = 0, 0, False
    for p in parts:
        last_used = i < len(letters) and p[0].casefold() == letters[i]
        if last_used:
            i += 1
        elif i == 0 or (skipped := skipped + 1) > 2:
            return False
    return i == len(letters) and last_used


def spelled_out(abbreviation: str, text: str) -> str | None:
    """The first run of words in `text` whose initials spell `abbreviation` ("Data Protection Officer" for
    "DPO"; "of", "and", "for", "the" may sit inside), or None. Failing that, a hyphenated compound whose last
    word, a long one, gives the last letter from its second root too ("anti-procyclicality" for "APC")."""
    letters = [c for c in abbreviation if c.isalpha()]
    if len(letters) < 2 or len(letters) != len(abbreviation.replace("-", "")):
        return None
    # The first word is a word, not the article "a" ("a price cap" is no "APC")
    words = [rf"(?i:{re.escape(c)})[\w']{'+' if i == 0 else '*'}" for i, c in enumerate(letters)]
    m = re.search(r"(?<![\w-])" + r"[\s-]+(?:(?:of|and|for|the)\s+)?".join(words) + r"(?![\w-])", text)
    if m is None and len(letters) >= 3:
        heads = words[:-2]
        inner = rf"(?i:{re.escape(letters[-2])})[a-z]{{2,}}(?i:{re.escape(letters[-1])})[a-z]{{4,}}"
        m = re.search(r"(?<![\w-])" + "".join(h + "-" for h in heads) + inner + r"(?![\w-])", text)
    return m.group(0) if m else None
