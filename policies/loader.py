"""Load a policy TOML file into frozen dataclasses, validating it strictly.

A bad policy must fail at start-up, never half-work: every error names the file,
the key path (e.g. `classes.realtime_risk.kv_min_share`) and the problem.
The accepted keys, their types and bounds are not listed here: they are read from the
dataclass fields of policies/model.py and their knob(...) metadata (policies/schema.py).
The file is the `path` argument or the packaged policies/default.toml; this package reads no
environment variable (the application's settings choose the path).
"""
from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any

from policies.errors import PolicyError
from policies.model import Policy
from policies.reader import Reader
from policies.risk_check import check_class


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """Read, validate and freeze a policy. Raises PolicyError naming file, key and problem."""
    if path is not None:
        source, text = os.fspath(path), _read(os.fspath(path))
    else:
        resource = resources.files("policies").joinpath("default.toml")
        source, text = str(resource), resource.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}", source=source) from None
    return policy_from_dict(data, source=source)


def policy_from_dict(data: Mapping[str, Any], *, source: str = "<memory>",
                     schema: type[Policy] = Policy) -> Policy:
    """Validate an already-parsed policy document (the structure of default.toml).

    `schema` is the Policy dataclass to build (a subclass may declare more knobs).
    """
    r = Reader(source)
    policy = r.build(schema, data, "", {"source": source})
    r.check_class_refs(policy, "", known=policy.classes)
    _check_heuristic_target(r, policy)
    _check_default_temperatures(r, policy)
    for c in policy.classes.values():
        check_class(r, c)  # the risk rule pack, when enabled (policies/risk_check.py)
    return policy


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read policy file: {exc.strerror}", source=path) from None


# The smallest temperature the engine samples with (engine.request.MIN_TEMPERATURE; a test keeps the
# two equal): a class default between 0 and this would fail every request that relies on it.
MIN_TEMPERATURE = 1e-2


def _check_default_temperatures(r: Reader, policy: Policy) -> None:
    for c in policy.classes.values():
        t = c.default_temperature
        if t is not None and 0 < t < MIN_TEMPERATURE:
            raise r.error(f"classes.{c.name}.default_temperature",
                          f"{t:g} is neither 0 (greedy) nor at least {MIN_TEMPERATURE:g}, the smallest temperature "
                          "the engine samples with")


def _check_heuristic_target(r: Reader, policy: Policy) -> None:
    """The long-input heuristic must not route inputs to a class that refuses them."""
    rules = policy.classification
    limit = policy.get(rules.long_input_class).max_input_tokens
    if rules.long_input_tokens > limit:
        raise r.error("classification.long_input_tokens",
                      f"{rules.long_input_tokens} exceeds max_input_tokens {limit} of {rules.long_input_class!r}, "
                      "so every input the heuristic routes there would be refused")
