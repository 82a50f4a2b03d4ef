"""Where each sentence of a document sits: its line, its article's heading and label, its table's header row.

Rulebooks are laid out in a few common ways, and a sentence alone often lacks the words a question uses:
  - EU style: "Article 4" on its own line, its title ("Execution time") on the next, numbered paragraphs
    "1. ..." and points "(a) ...": a paragraph's label is "Article 4(1)";
  - US style: "Sec. 3. Title." then subsections "(a) Reports required.--(1) A financial institution ..." and
    "(2) ...": labels "Sec. 3(a)(1)", "Sec. 3(a)(2)";
  - numbered paragraphs "9.1 An institution ...": label "Article 9" (the article the number belongs to);
  - a short unpunctuated line ("PS 5.5 Authorised push payment fraud", "1. Purpose and scope") titles the lines
    under it up to the next such line: its section; the first block of such lines titles the whole document
    ("Group Credit Risk Policy CR-07: Commercial Real Estate Lending"), so "the CRE policy's effective date"
    meets "Effective: 2026-04-01" in a line that never says CRE;
  - tables written as text lines ("Record type | Retention period | Storage", then one row per line, cells
    split by "|", a tab or two spaces or more): each row is read with its table's header row, so "what is the
    retention period for call recordings" meets "Call recordings | 5 years | encrypted store".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(?P<label>(?:article|art\.|section|sec\.|§|part|chapter|rule|regulation|paragraph|clause|"
                      r"schedule|annex)\s*(?P<num>\d+[A-Za-z]?))\b\.?(?P<title>.*)$", re.IGNORECASE)
_NUMBERED = re.compile(r"^(\d+)\.(?:\d+\s|\s)")  # "9.1 An institution ...", "2. Purpose ...": article 9, 2
_PARAGRAPH = re.compile(r"^(\d+)\.\s")  # "1. The payer's PSP ...": paragraph 1 of the article above
_MARKERS = re.compile(r"^\(([a-z]{1,2}|\d{1,2}|[ivx]{1,4})\)\s*(?:[^.(]{0,80}\.\s*--?\s*|[^.(]{0,80}\.—\s*)?"
                      r"(?:\((\d{1,2})\)\s)?")
_CELLS = re.compile(r"\s*\|\s*|\t+|\s{2,}")
TITLE_CHARS = 80
DOCUMENT_TITLE_CHARS = 160  # a document's title lines may be long ("supplementing the Union framework ...")


@dataclass(frozen=True)
class Place:
    line: str  # the line (paragraph) the sentence is in
    heading: str  # its article's heading, with the title line under a bare "Article 4"; "" if none
    label: str  # "Article 4(1)", "Section 3(a)(2)" (from "Sec. 3"), "9" (from "9.1" with no heading); "" if none
    header: str  # the header row of the table the sentence is a row of; "" if none
    is_heading: bool = False  # the line is an article's heading or its title line, not its text
    section: str = ""  # the short title line above it ("PS 5.5 Authorised push payment fraud"); "" if none
    title: str = ""  # the document's title lines (its first block of unpunctuated lines); "" if none


def cells(line: str) -> list[tuple[int, int]]:
    """The (start, end) of each cell of a table row written as a text line; [] when it is not one."""
    text = line.rstrip()
    if not ("|" in text or "\t" in text or re.search(r"\S\s{2,}\S", text.strip())):
        return []
    out, start = [], 0
    for m in _CELLS.finditer(text):
        if m.start() > start:
            out.append((start, m.start()))
        start = m.end()
    if start < len(text):
        out.append((start, len(text)))
    return [(a, b) for a, b in out if text[a:b].strip()]


_ABBREVIATED = {"sec.": "Section", "art.": "Article"}


def _written_out(label: str) -> str:
    """"Sec. 3" as "Section 3": the name a reader asks for."""
    word, _, rest = label.partition(" ")
    return f"{_ABBREVIATED[word.casefold()]} {rest}" if word.casefold() in _ABBREVIATED else label


def _is_title(text: str, limit: int = TITLE_CHARS) -> bool:
    """A line that titles what follows: short, with a letter, not a sentence (no final stop), nor a line that
    introduces a list ("In regulation 7-"), nor a table row. A numbered line may end on its bracketed subject
    ("7. Amendment of regulation 11 (reclaim reserve)")."""
    return 0 < len(text) <= limit and bool(re.search(r"[A-Za-z]{3}", text)) and text[-1] not in ".;:,-\u2013\u2014" \
        and (text[-1] != ")" or bool(_NUMBERED.match(text))) and len(cells(text)) < 2


def _document_title(lines: list[str]) -> str:
    """The document's first lines while they are titles (blank lines between them allowed)."""
    out = []
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if not _is_title(text, DOCUMENT_TITLE_CHARS) or _HEADING.match(text) or _NUMBERED.match(text):
            break
        out.append(text)
    return " ".join(out)


def _line_places(lines: list[str]) -> list[Place]:
    out: list[Place] = []
    title, section = _document_title(lines), ""
    heading = base = para = letter = num = ""
    header, header_cells, title_line = "", 0, -1
    for i, line in enumerate(lines):
        text = line.strip()
        m = _HEADING.match(text)
        if m:
            heading, base, para, letter, num = text, m.group("label"), "", "", ""
            if not m.group("title").strip(" .-–—:") and i + 1 < len(lines):  # the title on the next line
                title = lines[i + 1].strip()
                if title and len(title) <= TITLE_CHARS and not title[0].isdigit() and not title.startswith("("):
                    heading, title_line = f"{text} {title}", i + 1
        elif base and (p := _PARAGRAPH.match(text)):
            para, letter, num = p.group(1), "", ""
        elif base and (mk := _MARKERS.match(text)):
            first, second = mk.group(1), mk.group(2)
            if first.isdigit():
                num = first
            else:
                letter, num = first, second or ""
        if _is_title(text) and text not in title:
            section = text
        n_cells = len(cells(text))
        if n_cells >= 2 and n_cells == header_cells:
            row_header = header
        else:
            header, header_cells, row_header = (text, n_cells, "") if n_cells >= 2 else ("", 0, "")
        numbered = _NUMBERED.match(text)
        label = _written_out(base) + "".join(f"({x})" for x in (para, letter, num) if x) if base else \
            numbered.group(1) if numbered else ""
        out.append(Place(text, heading, label, row_header, bool(m) or i == title_line, section, title))
    return out


def places(text: str, sentences: list[str]) -> list[Place]:
    """The place of each of `sentences` (in document order, as textspans.sentence_spans gives them)."""
    lines = text.split("\n")
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    by_line = _line_places(lines)
    out, pos, line_no = [], 0, 0
    for s in sentences:
        found = text.find(s, pos)
        pos = found if found >= 0 else pos
        while line_no + 1 < len(starts) and starts[line_no + 1] <= pos:
            line_no += 1
        out.append(by_line[line_no])
    return out
