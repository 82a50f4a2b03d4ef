"""Helpers that write policy variants to disk, so the tests exercise the real file loader; and the shipped risk
pack's verdict on one event, for the typology tests."""
from __future__ import annotations

import copy
import dataclasses
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import pytest

from policies import load_policy
from policies.risk import evaluate, verdict
from policies.risk_model import RiskRules
from policies.risk_words import without_model

# (risk_level, recommended_action) pairs a verdict can give
LOW, MEDIUM, HIGH, BLOCK = ("low", "approve"), ("medium", "review"), ("high", "review"), ("high", "block")


def default_policy_dict() -> dict[str, Any]:
    return tomllib.loads(resources.files("policies").joinpath("default.toml").read_text(encoding="utf-8"))


def dump_toml(data: dict[str, Any]) -> str:
    """Minimal TOML writer for the policy's shape: nested tables of scalars."""
    lines: list[str] = []

    def emit(table: dict[str, Any], prefix: str) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{_key(k)} = {_value(v)}")
        for k, v in table.items():
            if isinstance(v, dict):
                emit(v, f"{prefix}.{_key(k)}" if prefix else _key(k))

    emit(data, "")
    return "\n".join(lines) + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else f'"{k}"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return repr(v)


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[[Callable[[dict[str, Any]], None] | None], Path]:
    """write_policy(mutate) -> path of the default policy after mutate(dict) edits it in place."""

    def write(mutate: Callable[[dict[str, Any]], None] | None = None, name: str = "policy.toml") -> Path:
        data = copy.deepcopy(default_policy_dict())
        if mutate is not None:
            mutate(data)
        path = tmp_path / name
        path.write_text(dump_toml(data), encoding="utf-8")
        return path

    return write


RULE_MEDIUM_AT, RULE_HIGH_AT, RULE_REVIEW_AT = 30, 51, 30  # the thresholds the rules' points were written against


def rules_layer(rules: RiskRules | None = None) -> RiskRules:
    """The pack's rules alone (the shipped one by default): its word model off (policies/risk_words.py; tested in
    test_risk_words.py) and the thresholds the rules' points were written against, so that these tests check what
    the rules read, the floors they set and the points they add, as the word model then reads them."""
    rules = rules or load_policy().get("realtime_risk").risk_rules
    return dataclasses.replace(without_model(rules), medium_at=RULE_MEDIUM_AT, high_at=RULE_HIGH_AT,
                               review_at=RULE_REVIEW_AT)


class Judge(Protocol):
    def __call__(self, event_type: str, amount: float | None = None, currency: str = "USD",
                 **attributes: Any) -> tuple[str, str]: ...


@dataclasses.dataclass
class Judged:
    """judged(event_type, amount, currency, **attributes) -> (risk_level, recommended_action): `rules`' verdict
    (default: the shipped rules, `rules_layer`) on one event at `timestamp`, the keyword arguments as its attributes
    (amount and currency only when an amount is given). Every event judged, with its verdict, is kept in `seen`."""

    timestamp: str
    rules: RiskRules = dataclasses.field(default_factory=rules_layer)
    seen: list[tuple[dict[str, Any], tuple[str, str]]] = dataclasses.field(default_factory=list)

    def __call__(self, event_type: str, amount: float | None = None, currency: str = "USD",
                 **attributes: Any) -> tuple[str, str]:
        event: dict[str, Any] = {"event_type": event_type, "attributes": attributes, "timestamp": self.timestamp}
        if amount is not None:
            event.update(amount=amount, currency=currency)
        v = verdict(self.rules, evaluate(self.rules, event))
        self.seen.append((event, (v["risk_level"], v["recommended_action"])))
        return self.seen[-1][1]


def judge_at(timestamp: str) -> Judged:
    """The rules layer's judge of events at `timestamp` (Judged)."""
    return Judged(timestamp)
