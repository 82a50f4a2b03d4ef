"""The README's risk example says what the code returns: the tour's curl event, its `# →` claim, and
docs/BENCHMARKS.md's sentence that gives its score and rules."""
from __future__ import annotations

import json
import re
from pathlib import Path

from evals.verdict_quality import README_EVENT, readme_verdict
from policies import load_policy
from policies.risk import evaluate

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (ROOT / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
RULES = load_policy().get("realtime_risk").risk_rules


def test_the_tour_sends_the_event_the_eval_checks() -> None:
    m = re.search(r"curl -s \$URL/v1/risk/assess .*?\\\n\s*-d '(\{.*?\})'\n", README, re.S)
    assert m, "the tour's /v1/risk/assess command"
    assert json.loads(m.group(1))["event"] == README_EVENT


def test_the_tours_claim_gives_the_rules_verdict() -> None:
    """The `# →` line under the tour's curl (tests/test_readme_tour.py checks it against the live stack) says
    the rules' level and action, and a score the rules plus the model's share can give."""
    m = re.search(r'/v1/risk/assess .*?\n# → "risk_level": "(\w+)", "score": (\d+), "recommended_action": "(\w+)"',
                  README, re.S)
    assert m, "the tour's claim on the wire"
    v = readme_verdict(RULES)
    assert (m.group(1), m.group(3)) == (v["risk_level"], v["recommended_action"])
    assert v["score"] <= int(m.group(2)) <= v["score"] + RULES.model_points
    assert v["score"] + RULES.model_points < RULES.high_at  # the model's share cannot make it high


def test_the_figures_section_gives_its_score_and_rules() -> None:
    m = re.search(r"The README's Cayman wire gets (\w+) / (\w+), score (\d+) from the rules \(([^)]*)\)", BENCHMARKS)
    assert m, "the sentence on the Cayman wire under the verdict figures"
    v = readme_verdict(RULES)
    assert (m.group(1), m.group(2), int(m.group(3))) == (v["risk_level"], v["recommended_action"], v["score"])
    named = {f.reason for f in evaluate(RULES, README_EVENT).fired}
    listed = " ".join(m.group(4).split())  # the sentence may wrap
    assert all(reason in listed for reason in named)
