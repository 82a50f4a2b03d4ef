"""Entry-level provenance of the risk pack: which labelled set every word, list item and entry was studied on.

A pack entry is anything a writer's miss could have put there: a rule, a mitigation, a check, one name or word
of a fact, one translation or abbreviation, one item of a word list (failed_words, qualifier_words, ...), one
currency's rate or threshold, one country of a list, one offset or condition of a mitigation, one `unless`
condition of a rule. Each is named by its path in `[classes.<name>.risk_rules]` and, for a list or a table of
values, the item: ("facts.structuring.words", "split deposits"), ("translations", "umbral"), ("usd_value",
"KES"); a whole entry has the item "" (("rules", "card_testing") is the rule). An entry was written for the
newest set in the repository when it first appeared in a commit of policies/default.toml (author dates):
it may have been tuned on that set, and evals/risk_lowo.py judges the set without it.

`build` walks the git history and writes the `pack` table of evals/data/risk_rule_provenance.json; `without`
applies the ablation to a loaded pack. Code readers (policies/risk_*.py) are not in the TOML: the file's
`readers` table names them and policies/risk_readers.py switches them off. Run: `python -m evals.risk_provenance`
(rewrites the table from git; entries not yet committed are written for the newest set).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import tomllib
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from policies.risk_model import MODEL_TABLES, RiskRules

DATA = Path(__file__).resolve().parent / "data"
PROVENANCE = DATA / "risk_rule_provenance.json"
POLICY = "policies/default.toml"
CLASS = "realtime_risk"
_WHOLE = ("rules", "mitigations", "checks")  # tables of named entries, each an entry of its own
_ITEMS = {"rules": ("unless",), "mitigations": ("when", "unless", "offsets"), "checks": ("subjects",),
          "facts": ("names", "words")}  # the parts of a named entry studied item by item
_SKIP = {"country_lists"}  # handled below: one entry per country of a list
_FITTED = frozenset(MODEL_TABLES)  # fitted, no entry: evals/risk_lowo.py refits them without the set judged


def entries(pack: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every (path, item) of a risk_rules table as TOML parses it; scalar knobs (thresholds) and the fitted word
    model are no entry: they are fitted held out instead (evals/risk_lowo.py `fit_thresholds`, evals/risk_fit.py)."""
    for key, value in pack.items():
        if key in _FITTED:
            continue
        if key in _ITEMS:
            for name, entry in value.items():
                if key in _WHOLE:
                    yield key, name
                for part in _ITEMS[key]:
                    yield from ((f"{key}.{name}.{part}", str(i)) for i in entry.get(part, ()))
        elif key in _SKIP:
            for name, codes in value.items():
                yield from ((f"{key}.{name}", c) for c in codes)
        elif isinstance(value, dict):
            yield from ((key, k) for k in value)
        elif isinstance(value, list):
            yield from ((key, str(i)) for i in value)


def event_sets(folder: Path = DATA) -> list[Path]:
    """The labelled sets, the project's own first, then the writers' in the order they arrived."""
    def order(p: Path) -> tuple[int, str]:
        tail = p.stem.removeprefix("risk_events").removeprefix("_independent")
        return (0 if p.stem == "risk_events" else 1, tail.zfill(3))
    return sorted(folder.glob("risk_events*.json"), key=order)


def _pack_at(commit: str, root: Path) -> Mapping[str, Any] | None:
    shown = subprocess.run(["git", "show", f"{commit}:{POLICY}"], cwd=root, capture_output=True, text=True)
    if shown.returncode:
        return None
    try:
        pack: Mapping[str, Any] | None = tomllib.loads(shown.stdout)["classes"][CLASS].get("risk_rules")
    except (tomllib.TOMLDecodeError, KeyError):
        return None
    return pack


def arrivals(root: Path) -> list[tuple[datetime, str]]:
    """(author date of the commit that added it, set name) per labelled set, oldest first."""
    out = subprocess.run(["git", "log", "--diff-filter=A", "--format=@%aI", "--name-only", "--",
                          "bench/data/risk_events*.json", "evals/data/risk_events*.json"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    seen: dict[str, datetime] = {}
    when = datetime.min
    for line in out.splitlines():
        if line.startswith("@"):
            when = datetime.fromisoformat(line[1:])
        elif line.strip():
            name = Path(line).stem
            seen[name] = min(when, seen.get(name, when))
    return sorted((t, n) for n, t in seen.items())


Studied = str | list[str]  # the set an entry was written for, or the sets: the newest and the one whose miss prompted it


def sets_of(value: Studied) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def build(root: Path, kept: Mapping[str, Mapping[str, Studied]]) -> dict[str, dict[str, Studied]]:
    """path -> item -> the set(s) each entry of the current pack was written for: the newest set when it first
    appeared in the git history, joined by the sets `kept` (the table as it was) already names for it: a set
    added by hand there (the set whose miss prompted an entry written later) stays."""
    sets = arrivals(root)
    log = subprocess.run(["git", "log", "--format=%H %aI", "--", POLICY], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    first: dict[tuple[str, str], datetime] = {}
    for line in filter(None, log):
        commit, date = line.split()
        pack = _pack_at(commit, root)
        for e in entries(pack or {}):
            first[e] = min(datetime.fromisoformat(date), first.get(e, datetime.fromisoformat(date)))
    current = tomllib.loads((root / POLICY).read_text(encoding="utf-8"))["classes"][CLASS]["risk_rules"]
    newest = sets[-1][1]
    table: dict[str, dict[str, Studied]] = {}
    for path, item in entries(current):
        when = first.get((path, item))
        name = newest if when is None else [n for t, n in sets if t <= when][-1] if sets[0][0] <= when else sets[0][1]
        known = sets_of(kept.get(path, {}).get(item, []))
        both = [name, *(s for s in known if s != name)]
        table.setdefault(path, {})[item] = both[0] if len(both) == 1 else sorted(both, key=[n for _, n in sets].index)
    return table


def written_for(table: Mapping[str, Mapping[str, Studied]], set_name: str) -> list[tuple[str, str]]:
    """The (path, item) entries written for `set_name`."""
    return sorted((p, i) for p, items in table.items() for i, s in items.items() if set_name in sets_of(s))


def _drop(node: Any, parts: list[str], items: set[str]) -> Any:
    """`node` (a dataclass, mapping or tuple) less `items` at the path `parts`: a mapping loses those keys, a
    tuple those items (conditions and list items compared as written)."""
    if parts:
        head, rest = parts[0], parts[1:]
        if isinstance(node, Mapping):
            return node if head not in node else {**node, head: _drop(node[head], rest, items)}
        return dataclasses.replace(node, **{head: _drop(getattr(node, head), rest, items)})
    if isinstance(node, Mapping):
        return {k: v for k, v in node.items() if k not in items}
    return tuple(i for i in node if str(i) not in items)


def without(rules: RiskRules, dropped: list[tuple[str, str]]) -> RiskRules:
    """The pack less the entries: whole rules, mitigations and checks first, then items of what is left; a rule
    or mitigation left with no `when` condition goes too."""
    by_path: dict[str, set[str]] = {}
    for path, item in dropped:
        by_path.setdefault(path, set()).add(item)
    out = dataclasses.replace(rules)  # a new pack: caches keyed by the pack (the vocabulary) start afresh
    for path in sorted(by_path, key=lambda p: (p.count("."), p)):
        parts = path.split(".")
        if len(parts) == 3 and parts[0] in _ITEMS and parts[1] not in getattr(out, parts[0]):
            continue  # the whole entry went already
        out = _drop(out, parts, by_path[path])
    # a rule or mitigation whose every `when` condition was written later did not exist before: it goes whole
    # (an empty `when` would hold on every event)
    return dataclasses.replace(out, rules={n: r for n, r in out.rules.items() if r.when},
                               mitigations={n: m for n, m in out.mitigations.items() if m.when})


def dump(log: Mapping[str, Any]) -> str:
    """The provenance file's text: one line per path of the pack, so that a new entry is a one-line diff."""
    def table(t: Mapping[str, Any]) -> str:
        return "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in t.items()) + "\n}"
    parts = [f"{json.dumps(k)}: {table(v) if isinstance(v, dict) else json.dumps(v, ensure_ascii=False)}"
             for k, v in log.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    log = json.loads(PROVENANCE.read_text(encoding="utf-8"))
    log["pack"] = build(root, log.get("pack", {}))
    PROVENANCE.write_text(dump(log), encoding="utf-8")
    counts: dict[str, int] = {}
    for items in log["pack"].values():
        for value in items.values():
            for s in sets_of(value):
                counts[s] = counts.get(s, 0) + 1
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main()
