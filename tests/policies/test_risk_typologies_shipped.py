"""The typology tests' hand-written events under the SHIPPED verdict (the word model on, the shipped thresholds).

The typology tests judge the rules layer (conftest.rules_layer). Here every event they write is judged again as
/v1/risk/assess would: every floor the rules set still holds (sanctions and fraud in progress block), and within
each test, where it writes both, every red-flag event (one the rules do not judge low) scores above every benign
look-alike (one they judge low) of the same event type: a look-alike is the same kind of event with the context
that explains it, not another typology the same test also writes."""
from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import pytest

from policies import load_policy
from policies.risk import ACTIONS, evaluate, verdict
from tests.policies.conftest import LOW, Judged

SHIPPED = load_policy().get("realtime_risk").risk_rules
MODULES = ("test_risk_typologies", "test_risk_crime_typologies", "test_risk_scam_typologies", "test_risk_aggravating")


def _cases() -> list[tuple[ModuleType, str]]:
    out = []
    for name in MODULES:
        module = importlib.import_module(f"tests.policies.{name}")
        out += [(module, n) for n, f in inspect.getmembers(module, inspect.isfunction)
                if n.startswith("test_") and "judged" in f.__code__.co_names]  # those that write with the judge
    return out


CASES = _cases()


def _written(module: ModuleType, name: str) -> list[tuple[dict[str, Any], tuple[str, str]]]:
    """The events the test `name` of `module` writes, each with the rules layer's verdict (the test's own assert
    checks that verdict is the one it expects)."""
    own: Judged = getattr(module, "judged")  # noqa: B009 (a module's global, read as any attribute)
    recorder = Judged(own.timestamp)
    setattr(module, "judged", recorder)  # noqa: B010
    try:
        getattr(module, name)()
    finally:
        setattr(module, "judged", own)  # noqa: B010
    return recorder.seen


def test_the_typology_tests_are_all_read() -> None:
    assert len(CASES) >= 50  # a renamed judge or module would otherwise leave this file checking nothing


@pytest.mark.parametrize("module, name", CASES, ids=[f"{m.__name__.rsplit('.', 1)[1]}::{n}" for m, n in CASES])
def test_the_shipped_verdict_keeps_the_floors_and_ranks_red_flags_above_look_alikes(module: ModuleType,
                                                                                     name: str) -> None:
    written = _written(module, name)
    assert written
    scored = []
    for event, rules_only in written:
        score = evaluate(SHIPPED, event)
        shipped = verdict(SHIPPED, score)
        assert ACTIONS.index(shipped["recommended_action"]) >= ACTIONS.index(score.action.value), event
        if rules_only[1] == "block":
            assert (shipped["risk_level"], shipped["recommended_action"]) == rules_only, event
        scored.append((shipped["score"], rules_only != LOW, event))
    red = [(s, e) for s, flagged, e in scored if flagged]
    benign = [(s, e) for s, flagged, e in scored if not flagged]
    for s, e in red:
        for b, look_alike in benign:
            if look_alike["event_type"] == e["event_type"]:
                assert s > b, f"red flag {e} scores {s}, its look-alike {look_alike} {b}"
