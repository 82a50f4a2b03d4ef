"""What the wheel ships (pyproject.toml): every package of the project but bench/, the developer benchmarks that
`finserve bench` runs from a checkout; and the labelled data the shipped evals read."""
from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

from tests.test_layers import PROJECT

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_wheel_holds_every_package_but_the_benchmarks() -> None:
    shipped = {name.split(".")[0] for name in find_packages(str(ROOT), include=CONFIG["packages"]["find"]["include"])}
    assert shipped == set(PROJECT) - {"bench"}


def test_the_evals_data_is_package_data() -> None:
    data = sorted(p for p in (ROOT / "evals" / "data").rglob("*") if p.is_file())
    matched = {p for pattern in CONFIG["package-data"]["evals"] for p in (ROOT / "evals").glob(pattern)}
    assert data and set(data) <= matched, sorted(str(p) for p in set(data) - matched)


def test_the_policy_data_is_package_data() -> None:
    """The fitted chooser's weights and the risk lexicon ship beside the policy: an installed image without them
    would answer with the plan alone and read no language the pack's own table lacks."""
    data = sorted(p for p in (ROOT / "policies").iterdir() if p.is_file() and p.suffix != ".py")
    matched = {p for pattern in CONFIG["package-data"]["policies"] for p in (ROOT / "policies").glob(pattern)}
    assert {p.name for p in data} >= {"answer_chooser.json", "risk_lexicon.json", "default.toml"}
    assert set(data) <= matched, sorted(str(p) for p in set(data) - matched)
