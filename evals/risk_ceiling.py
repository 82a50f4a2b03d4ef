"""What the risk pack's honest misses are made of, and how consistently the writers label look-alike events.

Every labelled set is judged by the pack less what was written for it (evals/risk_lowo.py `without_own`). Each
event whose recommended_action that pack gets wrong is put in one class:

- `not_read`: the label asks for more, and no rule fired at all (the signal was not read);
- `under_weighted`: the label asks for more, and rules fired, too weak together (read, wrong weight);
- `over_cleared`: the label asks for more, and a mitigation lowered a rule that fired (a benign reading won);
- `benign_not_read`: the label asks for less, rules fired, and no mitigation held (the explanation not read);
- `benign_under_weighted`: the label asks for less, and a mitigation held, too weak to clear it;
- `floor_too_strict`: the label asks for less, and a rule's action floor (review, block) set the action.

Apart from that class, a miss is a `label_disagreement` when the other writers label events of the same
typology (the `typology` field as written, lower case) with the action the pack gave, by majority: the pack
sided with the other writers. The typology table gives, per typology more than one writer used, the spread
of label_score across writers (the standard deviation of the writers' means) and the share of events whose
action differs from the other writers' majority for it. The `typology_oracle` reads each event as the mean
label_score of the same typology in the other writers' sets (no typology elsewhere: the other sets' mean):
the Spearman a reader that knew every event's typology, and nothing else, would get. Run:
`python -m evals.risk_ceiling [--json-file F]`.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.risk_lowo import readers_for, score_set
from evals.risk_provenance import PROVENANCE, event_sets, without, written_for
from evals.verdict_quality import spearman
from policies.risk import ACTIONS, RuleScore, verdict
from policies.risk_model import RiskRules
from policies.risk_readers import off

CLASSES = ("not_read", "under_weighted", "over_cleared", "benign_not_read", "benign_under_weighted",
           "floor_too_strict")


def miss_class(label: str, got: str, score: RuleScore | None) -> str:
    """The class of one missed action (CLASSES)."""
    if score is None:
        return "not_read"
    if ACTIONS.index(label) > ACTIONS.index(got):
        if not score.fired:
            return "not_read"
        return "over_cleared" if score.mitigated else "under_weighted"
    if ACTIONS.index(score.action.value) >= ACTIONS.index(got):
        return "floor_too_strict"
    return "benign_under_weighted" if score.mitigated else "benign_not_read"


def typology_of(row: Mapping[str, Any]) -> str:
    return str(row.get("typology", "")).strip().lower()


def honest(rules: RiskRules, paths: Sequence[Path], provenance: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Per set: (row, score, verdict) by the pack less what was written for the set."""
    out: dict[str, list[Any]] = {}
    for path in paths:
        ablated = without(rules, written_for(provenance["pack"], path.stem))
        with off(readers_for(provenance, path.stem)):
            scored = score_set(ablated, path)
        out[path.stem] = [(row, s, verdict(ablated, s) if s is not None else None)
                          for row, s in zip(scored.rows, scored.scores, strict=True)]
    return out


def by_typology(sets: Mapping[str, list[Any]]) -> dict[str, dict[str, list[Mapping[str, Any]]]]:
    """Typology -> set name -> its labelled rows of that typology."""
    by: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for name, triples in sets.items():
        for row, _, _ in triples:
            by[typology_of(row)][name].append(row)
    return by


def consistency(sets: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Per typology used by several writers: the writers, events, spread of their mean label_score, and the
    share of events whose action is not the other writers' majority; plus the typology oracle per set."""
    by = by_typology(sets)
    table: dict[str, Any] = {}
    for typ, writers in by.items():
        if len(writers) < 2 or not typ:
            continue
        means = [statistics.fmean(r["label_score"] for r in rows) for rows in writers.values()]
        off_majority = sum(r["recommended_action"] != majority(by, typ, name)
                           for name, rows in writers.items() for r in rows)
        n = sum(len(rows) for rows in writers.values())
        table[typ] = {"writers": len(writers), "events": n, "score_spread": round(statistics.pstdev(means), 1),
                      "action_off_majority": round(off_majority / n, 3)}
    oracle = {}
    for name, triples in sets.items():
        others = [r["label_score"] for o, t in sets.items() if o != name for r, _, _ in t]
        guess = [statistics.fmean([r["label_score"] for o, rows in by[typology_of(row)].items() if o != name
                                   for r in rows] or [statistics.fmean(others)]) for row, _, _ in triples]
        oracle[name] = round(spearman(guess, [float(r["label_score"]) for r, _, _ in triples]), 3)
    return {"typologies": dict(sorted(table.items(), key=lambda t: (-t[1]["writers"], t[0]))),
            "typology_oracle": oracle}


def majority(by: Mapping[str, Mapping[str, list[Mapping[str, Any]]]], typ: str, but: str) -> str | None:
    """The action most of the other writers' events of `typ` carry (None: no other writer used it)."""
    votes = Counter(r["recommended_action"] for name, rows in by[typ].items() if name != but for r in rows)
    return votes.most_common(1)[0][0] if votes else None


def ceiling(rules: RiskRules, paths: Sequence[Path], provenance: Mapping[str, Any]) -> dict[str, Any]:
    sets = honest(rules, paths, provenance)
    by = by_typology(sets)
    misses: dict[str, Any] = {}
    for name, triples in sets.items():
        counts = Counter(dict.fromkeys(CLASSES, 0))
        disagree = 0
        for row, score, v in triples:
            got = v["recommended_action"] if v else "approve"
            if got == row["recommended_action"]:
                continue
            counts[miss_class(row["recommended_action"], got, score)] += 1
            disagree += majority(by, typology_of(row), name) == got
        misses[name] = {"events": len(triples), "missed": sum(counts.values()), **counts,
                        "label_disagreement": disagree}
    return {"misses": misses, **consistency(sets)}


def main(argv: Sequence[str] | None = None) -> None:
    from policies import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--json-file", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    policy = load_policy(None)
    rules = policy.get(policy.classification.routes["risk"]).risk_rules
    report = ceiling(rules, event_sets(), json.loads(PROVENANCE.read_text(encoding="utf-8")))
    cols = ("missed", *CLASSES, "label_disagreement")
    print(f"{'set':26s} " + " ".join(f"{c[:12]:>12s}" for c in cols) + "   oracle rho")
    for name, m in report["misses"].items():
        print(f"{name:26s} " + " ".join(f"{m[c]:12d}" for c in cols) + f"   {report['typology_oracle'][name]:.3f}")
    total = {c: sum(m[c] for m in report["misses"].values()) for c in cols}
    print(f"{'all':26s} " + " ".join(f"{total[c]:12d}" for c in cols))
    typ = report["typologies"]
    print(f"{len(typ)} typologies used by several writers; mean spread of writer means "
          f"{statistics.fmean(t['score_spread'] for t in typ.values()):.1f} points; events off the others' "
          f"majority action {sum(t['action_off_majority'] * t['events'] for t in typ.values()) / sum(t['events'] for t in typ.values()):.3f}")
    for name, t in list(typ.items())[:25]:
        print(f"  {name:40s} writers {t['writers']:2d} events {t['events']:3d} spread {t['score_spread']:5.1f} "
              f"off-majority {t['action_off_majority']:.2f}")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
