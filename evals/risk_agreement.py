"""How consistently the writers themselves label the same kind of event: the ceiling of action accuracy on a new writer.

Every labelled set (evals/data/risk_events*.json) was written by a different person. For each event this finds
the most similar events the OTHER writers wrote and asks whether their actions agree with its own; no rule,
weight or threshold of the pack is judged, only the writers' labels against each other. Two readings:

- `typology`: the writer's `typology` name put in a canonical family (`family`: the first of FAMILIES whose
  words it holds; "ordinary" where it names none but a benign word) and a variant (`benign` where the name says
  look-alike, benign, ordinary, explained ...: the writer's own statement that the event only looks like the
  typology, else `suspicious`). Its neighbours are the other writers' events of the same family and variant,
  nearest first by the red-flag facts that hold (policies/risk_facts.py `read`, the shipped pack's vocabulary:
  Jaccard of the facts), then by the USD amount's decade band, then by the amount. The project's own 68 events
  carry no typology and are left out of this reading. `family_only` drops the variant (the benign statement).
- `knn`: leave-one-writer-out k-nearest neighbours on the event alone, no typology: the word model's marked
  words, facts and shape (policies/risk_words.py `features` less the rules' outcome, so no fitted weight enters),
  cosine similarity, the K nearest events of the other writers.

Eight writers name nearly every approval a look-alike (`marked`: at least MARKED of their approvals read benign);
the others name most of theirs as the typology they imitate, so for them the variant says little. The report
gives the typology reading again among the marked writers alone (`marked_writers`, each judged by the others
of them) with its confusion (own action, consensus): how far writers agree once the writer's intent, benign or
suspicious, is known, i.e. what is left when only review against block is to be decided.

Per event the neighbours' majority action (ties: the more severe) is its consensus; `agreement` is the share
of events whose own action is that consensus (what a reader that copies the other writers' labels of look-alike
events would score), `pairwise` the mean share of single neighbours that agree. Run:
`python -m evals.risk_agreement [--k K] [--json-file F]`.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.risk_provenance import event_sets
from evals.verdict_quality import as_route_reads, load_events
from policies.risk import ACTIONS, evaluate, outcome
from policies.risk_facts import read
from policies.risk_model import PACK_FEATURES, RiskRules
from policies.risk_words import features, without_model

K = 5
MARKED = 0.8  # share of a writer's approvals named benign for the writer to count as marking them
# (family, the words or phrases of a typology name that put it there); the first family that matches wins, so a
# name naming two ("bec payment to known mule") goes to the earlier.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sanctions", ("sanction", "sanctions", "sanctioned", "export control", "dual use", "embargoed", "vessel",
                   "sts", "shadow fleet", "circumvention")),
    ("crypto", ("crypto", "mixer", "unhosted")),
    ("bec", ("bec", "ceo", "invoice redirection")),
    ("elder", ("elder",)),
    ("account_takeover", ("account takeover", "ato", "sim swap", "device velocity")),
    ("card", ("card testing", "card fraud", "card acquiring", "merchant refund", "credit card")),
    ("app_scam", ("app", "authorised push payment", "scam", "impersonation")),
    ("mule", ("mule", "funnel")),
    ("structuring", ("structuring", "smurfing")),
    ("trade", ("tbml", "trade", "trade based", "invoicing", "commodity", "freight", "shipping", "gold",
               "precious metals", "phantom shipment")),
    ("pep_corruption", ("pep", "corruption", "bribery")),
    ("gambling", ("gambling", "casino", "betting", "lottery")),
    ("real_estate", ("real estate", "yacht")),
    ("npo_tf", ("npo", "terrorist", "charity")),
    ("new_dormant", ("dormant", "new account", "new or dormant")),
    ("velocity", ("velocity", "rapid movement", "pass through")),
    ("cash", ("cash",)),
    ("jurisdiction", ("high risk", "secrecy", "corridor", "offshore", "shell", "e residency", "geographic")),
)
BENIGN = frozenset({"lookalike", "look", "benign", "ordinary", "everyday", "explained", "verified", "false",
                    "documented"})
_TOKEN = re.compile(r"[a-z0-9]+")


def canonical(name: str) -> tuple[str, str] | None:
    """(family, variant) of a writer's typology name; None for no name."""
    tokens = _TOKEN.findall(name.lower().replace("look-alike", "lookalike").replace("onoff", "on off"))
    if not tokens:
        return None
    joined = f" {' '.join(tokens)} "
    variant = "benign" if BENIGN & set(tokens) else "suspicious"
    family = next((f for f, words in FAMILIES if any(f" {w} " in joined for w in words)), None)
    return (family or ("ordinary" if variant == "benign" else "other"), variant)


def usd(rules: RiskRules, event: Mapping[str, Any]) -> float:
    try:
        amount = max(float(event.get("amount") or 0.0), 0.0)
    except (TypeError, ValueError):
        return 0.0
    return amount * rules.usd_value.get(str(event.get("currency", "")), 1.0)


def reading(rules: RiskRules, row: Mapping[str, Any]) -> dict[str, Any]:
    """What the neighbour search reads of one labelled event: its family, facts, amount and word features."""
    event = as_route_reads(dict(row))
    if isinstance(event, str):
        event = {}
    facts = read(rules, event).values if event else {}
    feats = features(rules, event, outcome(evaluate(rules, event)), facts) if event else {}
    return {"action": row["recommended_action"], "typology": canonical(str(row.get("typology", ""))),
            "facts": frozenset(k for k, v in facts.items() if v is True),
            "log_usd": math.log10(1 + usd(rules, event)) if event else 0.0,
            "words": {k: v for k, v in feats.items() if k not in PACK_FEATURES}}


def consensus(actions: Sequence[str]) -> str:
    """The neighbours' majority action; a tie goes to the more severe."""
    votes = Counter(actions)
    return max(votes, key=lambda a: (votes[a], ACTIONS.index(a)))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def typology_neighbours(me: Mapping[str, Any], others: Sequence[Mapping[str, Any]], k: int, variant: bool
                        ) -> list[Mapping[str, Any]]:
    """The k other-writer events of `me`'s family (and variant), nearest by facts, amount band, amount."""
    fam = me["typology"]
    pool = [o for o in others if o["typology"] and o["typology"][0] == fam[0]
            and (not variant or o["typology"][1] == fam[1])]
    return sorted(pool, key=lambda o: (-_jaccard(me["facts"], o["facts"]),
                                       abs(int(me["log_usd"]) - int(o["log_usd"])),
                                       abs(me["log_usd"] - o["log_usd"])))[:k]


def knn_neighbours(me: Mapping[str, Any], others: Sequence[Mapping[str, Any]], matrix: Any, norms: Any,
                   columns: Mapping[str, int], k: int) -> list[Mapping[str, Any]]:
    """The k other-writer events nearest `me` by cosine of the word features (`matrix`: [others, columns])."""
    v = np.zeros(len(columns))
    for name, value in me["words"].items():
        if name in columns:
            v[columns[name]] = value
    sims = matrix @ v / (norms * (np.linalg.norm(v) or 1.0))
    return [others[i] for i in np.argsort(-sims, kind="stable")[:k]]


def _score(pairs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    judged = [(a, [n["action"] for n in ns]) for a, ns in pairs if ns]
    if not judged:
        return {"events": 0, "agreement": None, "pairwise": None}
    return {"events": len(judged),
            "agreement": round(sum(a == consensus(ns) for a, ns in judged) / len(judged), 3),
            "pairwise": round(statistics.fmean(sum(a == n for n in ns) / len(ns) for a, ns in judged), 3)}


def agreement(sets: Mapping[str, Sequence[Mapping[str, Any]]], k: int = K) -> dict[str, Any]:
    """Per set and over all: the three readings' agreement (module docstring) of `sets`' readings."""
    columns = {n: i for i, n in enumerate(sorted({w for rows in sets.values() for r in rows for w in r["words"]}))}
    report: dict[str, Any] = {}
    for name, rows in sets.items():
        others = [o for other, orows in sets.items() if other != name for o in orows]
        matrix = np.zeros((len(others), len(columns)))
        for i, o in enumerate(others):
            for w, value in o["words"].items():
                matrix[i, columns[w]] = value
        norms = np.linalg.norm(matrix, axis=1) + 1e-12
        typed = [r for r in rows if r["typology"]]
        report[name] = {
            "typology": _score([(r["action"], typology_neighbours(r, others, k, True)) for r in typed]),
            "family_only": _score([(r["action"], typology_neighbours(r, others, k, False)) for r in typed]),
            "knn": _score([(r["action"], knn_neighbours(r, others, matrix, norms, columns, k)) for r in rows]),
        }
    mean = {how: {m: round(statistics.fmean(v[how][m] for v in report.values() if v[how]["events"]), 3)
                  for m in ("agreement", "pairwise")} for how in ("typology", "family_only", "knn")}
    return {"k": k, "mean_over_sets": mean, "sets": report, "marked_writers": among_marked(sets, k)}


def marks(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a writer names at least MARKED of its approvals benign."""
    approvals = [r for r in rows if r["action"] == "approve"]
    return bool(approvals) and sum(bool(r["typology"] and r["typology"][1] == "benign")
                                   for r in approvals) >= MARKED * len(approvals)


def among_marked(sets: Mapping[str, Sequence[Mapping[str, Any]]], k: int) -> dict[str, Any]:
    """The typology reading among the writers who mark their approvals, each judged by the others of them, and
    its confusion: "own->consensus" -> events."""
    marked = {n: rows for n, rows in sets.items() if marks(rows)}
    per: dict[str, Any] = {}
    confusion: Counter[str] = Counter()
    for name, rows in marked.items():
        others = [o for other, orows in marked.items() if other != name for o in orows]
        pairs = [(r["action"], typology_neighbours(r, others, k, True)) for r in rows if r["typology"]]
        per[name] = _score(pairs)
        confusion.update(f"{a}->{consensus([n['action'] for n in ns])}" for a, ns in pairs if ns)
    return {"sets": per, "confusion": dict(sorted(confusion.items())),
            "mean": {m: round(statistics.fmean(v[m] for v in per.values() if v["events"]), 3)
                     for m in ("agreement", "pairwise")} if per else None}


def readings(rules: RiskRules, paths: Sequence[Path]) -> dict[str, list[dict[str, Any]]]:
    plain = without_model(rules)
    return {p.stem: [reading(plain, r) for r in load_events(p)] for p in paths}


def main(argv: Sequence[str] | None = None) -> None:
    from policies import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--k", type=int, default=K, help="neighbours per event")
    parser.add_argument("--json-file", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    policy = load_policy(None)
    report = agreement(readings(policy.get(policy.classification.routes["risk"]).risk_rules, event_sets()), args.k)
    hows = ("typology", "family_only", "knn")
    print(f"k = {report['k']}; agreement (pairwise) of each event's action with its neighbours' majority")
    print(f"{'set':26s} " + " ".join(f"{h:>20s}" for h in hows))
    for name, r in report["sets"].items():
        cells = [f"{r[h]['agreement']:.3f} ({r[h]['pairwise']:.3f})" if r[h]["events"] else "-" for h in hows]
        print(f"{name:26s} " + " ".join(f"{c:>20s}" for c in cells))
    m = report["mean_over_sets"]
    print(f"{'mean over sets':26s} " + " ".join(f"{m[h]['agreement']:.3f} ({m[h]['pairwise']:.3f})".rjust(20)
                                                for h in hows))
    marked = report["marked_writers"]
    print(f"typology among the {len(marked['sets'])} writers who name their approvals benign: {marked['mean']}; "
          f"own->consensus {marked['confusion']}")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
