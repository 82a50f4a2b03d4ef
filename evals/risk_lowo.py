"""Leave-one-writer-out figures of the risk pack: judge each labelled set by what was not written for it.

Every labelled set (evals/data/risk_events*.json) was written by a different person. The pack's entries and code
readers were written after some of them arrived; evals/data/risk_rule_provenance.json says which set each was
written for (evals/risk_provenance.py: every rule, mitigation and check, every name and word of a fact, every
translation, list word, currency and country, every code reader). Per set this reports:

- `pack`: the pack as shipped (what `finserve eval verdict --quality --rules-only` reports);
- `without_own`: the pack less every entry and code reader written for this set: the figure a change must
  hold on sets it was not written for (the score-to-verdict thresholds stay the shipped ones; with a word
  model, evals/risk_fit.py, the model and the thresholds are refitted on the other sets read by that pack);
- `held_out_thresholds`: the score-to-verdict thresholds (medium_at, high_at, review_at) fitted on the
  other sets only (`fit_thresholds`), then applied to this one.
- `honest_thresholds`: the thresholds fitted on the other sets' `without_own` scores (each scored by a pack fitted
  without it), applied to this set's `without_own` scores: whether thresholds read off honest scores would serve a
  new writer better than the shipped ones (`fitted_on_honest`: the same fit over every set).

`fit_thresholds` over all sets gives the thresholds the pack ships (the calibration is fitted on the union,
checked on each set held out). Run: `python -m evals.risk_lowo [--json-file F] [--events-file E]`; E gets
every event's `without_own` verdict beside its label (`event_rows`), to read the honest misses by typology.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.risk_fit import fit, rescored
from evals.risk_provenance import PROVENANCE, event_sets, sets_of, without, written_for
from evals.verdict_quality import as_route_reads, figures, load_events
from policies.risk import ACTIONS, LEVELS, RuleScore, evaluate, verdict
from policies.risk_model import RiskRules
from policies.risk_readers import off
from policies.risk_words import without_model

SUMMARY = ("spearman", "risk_level_accuracy", "recommended_action_accuracy")


@dataclasses.dataclass(frozen=True)
class Scored:
    """One labelled set read and scored once: thresholds can then be tried without scoring again."""

    name: str  # the file's stem, e.g. "risk_events_independent7"
    rows: tuple[dict[str, Any], ...]  # the labelled events
    scores: tuple[RuleScore | None, ...]  # per event; None where the route would refuse the event


def score_set(rules: RiskRules, path: Path) -> Scored:
    rows = load_events(path)
    read = [as_route_reads(r) for r in rows]
    return Scored(path.stem, tuple(rows), tuple(None if isinstance(e, str) else evaluate(rules, e) for e in read))


def set_figures(rules: RiskRules, scored: Scored) -> dict[str, Any]:
    """Spearman, level and action accuracy of `rules`' thresholds on a set scored with the same pack."""
    verdicts = [verdict(rules, s) if s is not None else None for s in scored.scores]
    full = figures(scored.rows, verdicts)
    return {k: full[k] for k in SUMMARY}


def readers_for(provenance: Mapping[str, Any], set_name: str) -> list[str]:
    """The code readers written for `set_name`."""
    return sorted(n for n, s in provenance.get("readers", {}).items() if set_name in sets_of(s))


def held_out_scored(rules: RiskRules, path: Path, provenance: Mapping[str, Any], others: Sequence[Path] = ()
                    ) -> tuple[RiskRules, Scored]:
    """The pack a set is judged by in `held_out` (less every entry and reader written for it; a word model
    (policies/risk_words.py) and the thresholds refitted on `others`, read by that same pack) and the set scored
    by it: nothing of the set's own labels or of what was written for it enters its verdicts."""
    own, readers = written_for(provenance["pack"], path.stem), readers_for(provenance, path.stem)
    ablated = without(rules, own)
    with off(readers):
        if not rules.word_model:
            return ablated, score_set(ablated, path)
        plain = without_model(ablated)
        train = [score_set(plain, p) for p in others]
        fitted = fit(plain, [(s.rows, s.scores) for s in train])
        fitted = fit_thresholds(fitted, [dataclasses.replace(s, scores=rescored(fitted, s.rows, s.scores))
                                         for s in train])
        mine = score_set(plain, path)
        return fitted, dataclasses.replace(mine, scores=rescored(fitted, mine.rows, mine.scores))


def held_out(rules: RiskRules, path: Path, provenance: Mapping[str, Any], others: Sequence[Path] = ()
             ) -> dict[str, Any]:
    """A set's figures by the pack less every entry and reader written for it (`held_out_scored`)."""
    return {**_left_out(provenance, path.stem), **set_figures(*held_out_scored(rules, path, provenance, others))}


def _left_out(provenance: Mapping[str, Any], set_name: str) -> dict[str, int]:
    """How many pack entries and code readers written for the set its held-out figure leaves out."""
    return {"dropped": len(written_for(provenance["pack"], set_name)),
            "readers_off": len(readers_for(provenance, set_name))}


def event_rows(rules: RiskRules, scored: Scored) -> list[dict[str, Any]]:
    """Per event of a set scored by `rules`: its label beside the verdict and the rules and mitigations that
    counted, so that the honest misses (`held_out_scored`) can be read by typology and attribute style."""
    rows = []
    for i, (row, s) in enumerate(zip(scored.rows, scored.scores, strict=True)):
        v = verdict(rules, s) if s is not None else None
        rows.append({"set": scored.name, "index": i, "event_id": row["event"].get("event_id"),
                     "typology": row.get("typology"), "label_action": row["recommended_action"],
                     "label_level": row["risk_level"], "label_score": row.get("label_score"),
                     "action": v and v["recommended_action"], "level": v and v["risk_level"],
                     "score": v and v["score"], "fired": [f.rule for f in s.fired] if s else None,
                     "mitigated": [m.mitigation for m in s.mitigated] if s else None})
    return rows


def fit_thresholds(rules: RiskRules, sets: Sequence[Scored]) -> RiskRules:
    """The pack with the medium_at, high_at and review_at (review_model_at where the pack has an action head, read
    on its score, then block_model_at where it has a block head, `fit_block_at`; even values, 10-90) that get most
    levels and actions right over `sets`, each set weighted alike (a large set must not outvote a small writer);
    ties keep the values nearest the shipped ones. The verdict's rule (policies/risk.py `verdict`), on arrays: action = the
    score's action raised to the fired rules' floor, level = the score's level raised to the action."""
    grid = np.arange(10, 91, 2)
    head = bool(rules.review_model)  # the action follows the action head's score, not the score
    points, reviews, floor, level_label, action_label, weight = (np.array(a) for a in zip(*(
        (s.points if s else -1, (s.review if head and s.review is not None else s.points) if s else -1,
         ACTIONS.index(s.action.value) if s else 0, LEVELS.index(row["risk_level"]),
         ACTIONS.index(row["recommended_action"]), 1 / len(one.rows))
        for one in sets for row, s in zip(one.rows, one.scores, strict=True)), strict=True))
    valid = points >= 0
    at = (points[None, :] >= grid[:, None]).astype(int)  # [G, N]: the score reaches each threshold
    action = np.maximum((reviews[None, :] >= grid[:, None]).astype(int), floor[None, :])  # [R, N]
    level = np.maximum((at[:, None, :] + at[None, :, :])[None], action[:, None, None, :])  # [R, M, H, N]
    right_action = ((action == action_label) & valid) @ weight  # [R]
    right_level = ((level == level_label) & valid) @ weight  # [R, M, H]
    got = right_level + right_action[:, None, None]
    review, medium, high = np.meshgrid(grid, grid, grid, indexing="ij")
    drift = abs(medium - rules.medium_at) + abs(high - rules.high_at) + \
        abs(review - (rules.review_model_at if head else rules.review_at))
    got = np.where(high > medium, np.round(got, 9), -1.0)
    best = np.lexsort((drift.ravel(), -got.ravel()))[0]
    r, m, h = np.unravel_index(best, got.shape)
    fitted = dataclasses.replace(rules, medium_at=int(grid[m]), high_at=int(grid[h]))
    if head:
        return fit_block_at(dataclasses.replace(fitted, review_model_at=int(grid[r])), sets)
    return dataclasses.replace(fitted, review_at=int(grid[r]))


def fit_block_at(rules: RiskRules, sets: Sequence[Scored]) -> RiskRules:
    """The pack with the block_model_at (even, 10-90) that gets most actions right over `sets` (each set weighted
    alike) given its other thresholds, the block head turning a review into a block (policies/risk.py `verdict`);
    ties keep the value nearest the shipped one. A pack without a block head
    comes back as it is."""
    if not rules.block_model:
        return rules
    grid = np.arange(10, 91, 2)
    got = np.zeros(len(grid))
    for one in sets:
        for row, s in zip(one.rows, one.scores, strict=True):
            if s is None or s.block is None:
                continue
            action = ACTIONS.index(verdict(rules, dataclasses.replace(s, block=None))["recommended_action"])
            label = ACTIONS.index(row["recommended_action"])
            got += np.where((s.block >= grid) & (action > 0), label == 2, action == label) / len(one.rows)
    best = np.lexsort((abs(grid - rules.block_model_at), -np.round(got, 9)))[0]
    return dataclasses.replace(rules, block_model_at=int(grid[best]))


def lowo(rules: RiskRules, paths: Sequence[Path], provenance: Mapping[str, Any],
         events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per set: the pack's figures, without the entries written for it, and with thresholds fitted elsewhere;
    `events`, where given, gets every event's row of the `without_own` judgement (`event_rows`)."""
    scored = [score_set(rules, p) for p in paths]
    report: dict[str, Any] = {}
    honest: list[tuple[RiskRules, Scored]] = []
    for i, s in enumerate(scored):
        others = [o for j, o in enumerate(scored) if j != i]
        fitted = fit_thresholds(rules, others) if others else rules
        judged, mine = held_out_scored(rules, paths[i], provenance, [p for j, p in enumerate(paths) if j != i])
        honest.append((judged, mine))
        if events is not None:
            events.extend(event_rows(judged, mine))
        report[s.name] = {
            "events": len(s.rows), "pack": set_figures(rules, s),
            "without_own": {**_left_out(provenance, s.name), **set_figures(judged, mine)},
            "held_out_thresholds": {**_thresholds(fitted), **set_figures(fitted, s)},
        }
    # Thresholds read off the other sets' honest scores (each scored by models fitted without it), applied to this
    # set's honest scores: what fitting the thresholds on honest scores would give a writer nobody fitted on.
    for i, (judged, mine) in enumerate(honest):
        others = [m for j, (_, m) in enumerate(honest) if j != i]
        cut = fit_thresholds(rules, others) if others else rules
        cut_judged = dataclasses.replace(judged, medium_at=cut.medium_at, high_at=cut.high_at, review_at=cut.review_at,
                                         review_model_at=cut.review_model_at, block_model_at=cut.block_model_at)
        report[mine.name]["honest_thresholds"] = {**_thresholds(cut), **set_figures(cut_judged, mine)}
    union = fit_thresholds(rules, scored)
    on_honest = fit_thresholds(rules, [m for _, m in honest])
    return {"shipped": _thresholds(rules), "fitted_on_all": _thresholds(union),
            "fitted_on_honest": _thresholds(on_honest), "sets": report}


def _thresholds(rules: RiskRules) -> dict[str, int]:
    review = ("review_model_at", rules.review_model_at) if rules.review_model else ("review_at", rules.review_at)
    block = {"block_model_at": rules.block_model_at} if rules.block_model else {}
    return {"medium_at": rules.medium_at, "high_at": rules.high_at, review[0]: review[1], **block}


def main(argv: Sequence[str] | None = None) -> None:
    from policies import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--policy", default=None, help="policy TOML (default: the shipped one)")
    parser.add_argument("--json-file", default=None, help="write the report here too")
    parser.add_argument("--events-file", default=None, help="write every event's without_own verdict here (JSON)")
    args = parser.parse_args(argv)
    policy = load_policy(args.policy)
    rules = policy.get(policy.classification.routes["risk"]).risk_rules
    events: list[dict[str, Any]] | None = [] if args.events_file else None
    report = lowo(rules, event_sets(), json.loads(PROVENANCE.read_text(encoding="utf-8")), events)
    print(f"{'set':26s} {'pack rho/level/action':>24s} {'without own':>24s} {'held-out thresholds':>24s}")
    for name, r in report["sets"].items():
        cols = [" / ".join(f"{r[c][k]:.3f}" for k in SUMMARY) for c in ("pack", "without_own", "held_out_thresholds")]
        print(f"{name:26s} {cols[0]:>24s} {cols[1]:>24s} {cols[2]:>24s}")
    for column in ("without_own", "honest_thresholds"):
        mean = {k: sum(r[column][k] for r in report["sets"].values()) / len(report["sets"]) for k in SUMMARY}
        print(f"mean {column:21s}", " / ".join(f"{mean[k]:.3f}" for k in SUMMARY))
    print("thresholds shipped", report["shipped"], "fitted on all sets", report["fitted_on_all"],
          "fitted on honest scores", report["fitted_on_honest"])
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.events_file:
        Path(args.events_file).write_text(json.dumps(events, indent=0) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
