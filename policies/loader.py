"""Load a policy TOML file into frozen dataclasses, validating it strictly.

A bad policy must fail at start-up, never half-work: every error names the file,
the key path (e.g. `classes.realtime_risk.kv_min_share`) and the problem.
Resolution order of the file: the `path` argument, then $FINSERVE_POLICY, then the
packaged policies/default.toml.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

from policies.errors import PolicyError
from policies.model import ClassificationRules, ClassPolicy, Policy, SLOTargets

ENV_VAR = "FINSERVE_POLICY"
NO_TARGET = "none"  # a latency target written as "none" means the class has no target for it

# Class names travel in an HTTP header and in metric labels, so keep them plain.
_CLASS_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

_CLASS_KEYS = frozenset({
    "description", "priority", "max_input_tokens", "max_output_tokens", "max_running", "queue_limit",
    "kv_min_share", "kv_max_share", "step_token_share", "preemptible", "prefix_caching", "slo",
    "prefill_isolation", "shield_prefill_tokens",
})
_OPTIONAL_CLASS_KEYS = frozenset({"description"})
_SLO_KEYS = frozenset({"ttft_ms", "tpot_ms", "e2e_ms", "percentile", "attainment_goal"})
_CLASSIFICATION_KEYS = frozenset({"routes", "long_input_tokens", "long_input_class", "default_class"})


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """Read, validate and freeze a policy. Raises PolicyError naming file, key and problem."""
    if path is not None:
        source, text = os.fspath(path), _read(os.fspath(path))
    elif os.environ.get(ENV_VAR):
        source = os.environ[ENV_VAR]
        text = _read(source)
    else:
        resource = resources.files("policies").joinpath("default.toml")
        source, text = str(resource), resource.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}", source=source) from None
    return policy_from_dict(data, source=source)


def policy_from_dict(data: Mapping[str, Any], *, source: str = "<memory>") -> Policy:
    """Validate an already-parsed policy document (the structure of default.toml)."""
    r = _Reader(source)
    r.keys(data, "", required={"classes", "classification"})
    classes_raw = r.table(data, "", "classes")
    if not classes_raw:
        raise r.error("classes", "at least one workload class is required")
    classes = {name: _class_policy(r, name, raw) for name, raw in classes_raw.items()}
    _check_cross_class(r, classes)
    rules = _classification(r, r.table(data, "", "classification"), classes)
    return Policy(classes=classes, classification=rules, source=source)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read policy file: {exc.strerror}", source=path) from None


def _class_policy(r: _Reader, name: str, raw: Any) -> ClassPolicy:
    key = f"classes.{name}"
    if not _CLASS_NAME.match(name):
        raise r.error(key, "class names must be lowercase letters, digits and '_', starting with a letter")
    if not isinstance(raw, dict):
        raise r.error(key, f"must be a table, not {_type_name(raw)}")
    r.keys(raw, key, required=_CLASS_KEYS - _OPTIONAL_CLASS_KEYS, optional=_OPTIONAL_CLASS_KEYS)
    kv_min = r.share(raw, key, "kv_min_share")
    kv_max = r.share(raw, key, "kv_max_share")
    if kv_max <= 0:
        raise r.error(f"{key}.kv_max_share", "must be > 0, or the class could never hold a KV block")
    if kv_min > kv_max:
        raise r.error(f"{key}.kv_min_share", f"{kv_min} is larger than kv_max_share {kv_max}")
    return ClassPolicy(
        name=name,
        priority=r.integer(raw, key, "priority"),
        slo=_slo(r, f"{key}.slo", r.table(raw, key, "slo")),
        max_input_tokens=r.positive_int(raw, key, "max_input_tokens"),
        max_output_tokens=r.positive_int(raw, key, "max_output_tokens"),
        max_running=r.positive_int(raw, key, "max_running"),
        queue_limit=r.positive_int(raw, key, "queue_limit"),
        kv_min_share=kv_min,
        kv_max_share=kv_max,
        step_token_share=r.share(raw, key, "step_token_share"),
        preemptible=r.boolean(raw, key, "preemptible"),
        prefix_caching=r.boolean(raw, key, "prefix_caching"),
        description=r.string(raw, key, "description") if "description" in raw else "",
        prefill_isolation=r.boolean(raw, key, "prefill_isolation"),
        shield_prefill_tokens=_shield(r, raw, key),
    )


def _shield(r: "_Reader", raw: dict[str, Any], key: str) -> int:
    value = r.integer(raw, key, "shield_prefill_tokens")
    if value < -1:
        raise r.error(f"{key}.shield_prefill_tokens", f"{value} is neither -1 (no cap) nor a token count >= 0")
    return value


def _slo(r: _Reader, key: str, raw: dict[str, Any]) -> SLOTargets:
    r.keys(raw, key, required=_SLO_KEYS)
    percentile = r.number(raw, key, "percentile")
    if not 0 < percentile <= 100:
        raise r.error(f"{key}.percentile", f"must be in (0, 100], got {percentile}")
    goal = r.number(raw, key, "attainment_goal")
    if not 0 < goal <= 1:
        raise r.error(f"{key}.attainment_goal", f"must be a fraction in (0, 1], got {goal}")
    return SLOTargets(
        ttft_ms=r.target_ms(raw, key, "ttft_ms"),
        tpot_ms=r.target_ms(raw, key, "tpot_ms"),
        e2e_ms=r.target_ms(raw, key, "e2e_ms"),
        percentile=percentile,
        attainment_goal=goal,
    )


def _check_cross_class(r: _Reader, classes: dict[str, ClassPolicy]) -> None:
    seen: dict[int, str] = {}
    for c in classes.values():
        if c.priority in seen:
            raise r.error(f"classes.{c.name}.priority",
                          f"{c.priority} is also the priority of {seen[c.priority]!r}; priorities must be unique")
        seen[c.priority] = c.name
    for field in ("kv_min_share", "step_token_share"):
        total = sum(getattr(c, field) for c in classes.values())
        if total > 1 + 1e-9:
            parts = " + ".join(f"{c.name} {getattr(c, field)}" for c in classes.values())
            raise r.error(f"classes.*.{field}", f"shares sum to {total:g} ({parts}); the sum must be <= 1")


def _classification(r: _Reader, raw: dict[str, Any], classes: Mapping[str, ClassPolicy]) -> ClassificationRules:
    key = "classification"
    r.keys(raw, key, required=_CLASSIFICATION_KEYS)
    routes = r.table(raw, key, "routes")
    for route in routes:
        r.class_ref(routes, f"{key}.routes", route, classes)
    long_class = r.class_ref(raw, key, "long_input_class", classes)
    threshold = r.positive_int(raw, key, "long_input_tokens")
    if threshold > classes[long_class].max_input_tokens:
        raise r.error(f"{key}.long_input_tokens",
                      f"{threshold} exceeds max_input_tokens {classes[long_class].max_input_tokens} of {long_class!r}, "
                      "so every input the heuristic routes there would be refused")
    return ClassificationRules(
        routes=MappingProxyType(dict(routes)),
        long_input_tokens=threshold,
        long_input_class=long_class,
        default_class=r.class_ref(raw, key, "default_class", classes),
    )


class _Reader:
    """Typed accessors that raise PolicyError with the file and full key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, problem: str) -> PolicyError:
        return PolicyError(problem, source=self.source, key=key)

    def keys(self, raw: Mapping[str, Any], key: str, *, required: frozenset[str] | set[str],
             optional: frozenset[str] = frozenset()) -> None:
        for k in sorted(raw):
            if k not in required and k not in optional:
                allowed = ", ".join(sorted(required | optional))
                raise self.error(_join(key, k), f"unknown key (allowed here: {allowed})")
        for k in sorted(required):
            if k not in raw:
                raise self.error(_join(key, k), "missing required key")

    def _get(self, raw: Mapping[str, Any], key: str, name: str, types: tuple[type, ...], what: str) -> Any:
        value = raw[name]
        # bool is an int subclass in Python; `priority = true` is a mistake, not 1.
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise self.error(_join(key, name), f"must be {what}, not {_type_name(value)} {value!r}")
        return value

    def table(self, raw: Mapping[str, Any], key: str, name: str) -> dict[str, Any]:
        return self._get(raw, key, name, (dict,), "a table")

    def integer(self, raw: Mapping[str, Any], key: str, name: str) -> int:
        return self._get(raw, key, name, (int,), "an integer")

    def positive_int(self, raw: Mapping[str, Any], key: str, name: str) -> int:
        value = self.integer(raw, key, name)
        if value <= 0:
            raise self.error(_join(key, name), f"must be a positive integer, got {value}")
        return value

    def number(self, raw: Mapping[str, Any], key: str, name: str) -> float:
        value = float(self._get(raw, key, name, (int, float), "a number"))
        if not math.isfinite(value):  # TOML allows nan and inf; no policy value means either
            raise self.error(_join(key, name), f"must be a finite number, got {value}")
        return value

    def share(self, raw: Mapping[str, Any], key: str, name: str) -> float:
        value = self.number(raw, key, name)
        if not 0.0 <= value <= 1.0:
            raise self.error(_join(key, name), f"must be a fraction in [0, 1], got {value}")
        return value

    def boolean(self, raw: Mapping[str, Any], key: str, name: str) -> bool:
        return self._get(raw, key, name, (bool,), "true or false")

    def string(self, raw: Mapping[str, Any], key: str, name: str) -> str:
        return self._get(raw, key, name, (str,), "a string")

    def target_ms(self, raw: Mapping[str, Any], key: str, name: str) -> float | None:
        if raw[name] == NO_TARGET:
            return None
        value = self._get(raw, key, name, (int, float), f'a number of milliseconds or "{NO_TARGET}"')
        if not math.isfinite(value) or value <= 0:
            raise self.error(_join(key, name), f'must be > 0 (write "{NO_TARGET}" for no target), got {value}')
        return float(value)

    def class_ref(self, raw: Mapping[str, Any], key: str, name: str, classes: Mapping[str, ClassPolicy]) -> str:
        value = self.string(raw, key, name)
        if value not in classes:
            raise self.error(_join(key, name),
                             f"refers to undefined class {value!r} (defined: {', '.join(sorted(classes))})")
        return value


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table",
            list: "array"}.get(type(value), type(value).__name__)
