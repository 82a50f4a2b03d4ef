"""The default policy loads; every kind of mistake in a policy file is reported with file, key and problem."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, load_policy

CLASSES = ("realtime_risk", "document_qa", "bulk_extraction")


def test_default_policy_has_the_three_classes_in_priority_order() -> None:
    policy = load_policy()
    assert [c.name for c in policy.by_priority] == list(CLASSES)
    assert policy.source.endswith("default.toml")
    risk, docs, bulk = (policy.get(n) for n in CLASSES)
    assert risk.slo.ttft_ms is not None and risk.slo.ttft_ms <= 1000
    assert risk.max_output_tokens <= 64 and not risk.preemptible
    assert docs.max_input_tokens >= 6000 and docs.prefix_caching
    assert bulk.preemptible and bulk.slo.ttft_ms is None and bulk.step_token_share == 0
    assert sum(c.kv_min_share for c in policy.classes.values()) <= 1
    # No class can grow into the guaranteed share of the others.
    for c in policy.classes.values():
        others = sum(o.kv_min_share for o in policy.classes.values() if o is not c)
        assert c.kv_max_share + others <= 1 + 1e-9, c.name
    assert policy.classification.routes["risk"] == "realtime_risk"
    assert "chat" not in policy.classification.routes


def test_loaded_policy_is_immutable() -> None:
    policy = load_policy()
    with pytest.raises(TypeError):
        policy.classes["x"] = policy.get("realtime_risk")  # type: ignore[index]
    with pytest.raises(TypeError):
        policy.classification.routes["chat"] = "realtime_risk"  # type: ignore[index]


def test_explicit_path_is_loaded_and_the_environment_is_ignored(
    write_policy: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # FINSERVE_POLICY is read by the application's settings, which pass the path on; the
    # package itself must not pick a file from the environment behind their back.
    monkeypatch.setenv("FINSERVE_POLICY", str(tmp_path / "nope.toml"))
    assert load_policy().source.endswith("default.toml")
    explicit = write_policy(_set("classes.realtime_risk.max_running", 5), name="explicit.toml")
    policy = load_policy(explicit)
    assert policy.source == str(explicit)
    assert policy.get("realtime_risk").max_running == 5


def test_missing_file_fails_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(PolicyError, match="cannot read policy file") as err:
        load_policy(missing)
    assert str(missing) in str(err.value)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        d[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        del d[last]

    return mutate


def _both(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        for m in mutations:
            m(d)

    return mutate


BAD_FILES = [
    ("unknown top-level key", _set("scheduler", {"mode": "x"}), "scheduler", "unknown key"),
    ("typo in a class key", _set("classes.realtime_risk.kv_min_shar", 0.1),
     "classes.realtime_risk.kv_min_shar", "unknown key"),
    ("unknown slo key", _set("classes.document_qa.slo.p99_ms", 5), "classes.document_qa.slo.p99_ms", "unknown key"),
    ("missing class key", _delete("classes.document_qa.queue_limit"), "classes.document_qa.queue_limit",
     "missing required key"),
    ("missing slo table", _delete("classes.bulk_extraction.slo"), "classes.bulk_extraction.slo",
     "missing required key"),
    ("missing classification", _delete("classification"), "classification", "missing required key"),
    ("string for integer", _set("classes.realtime_risk.priority", "high"), "classes.realtime_risk.priority",
     "must be an integer"),
    ("boolean for integer", _set("classes.realtime_risk.max_running", True), "classes.realtime_risk.max_running",
     "must be an integer"),
    ("float for integer", _set("classes.document_qa.max_input_tokens", 6000.5),
     "classes.document_qa.max_input_tokens", "must be an integer"),
    ("string for boolean", _set("classes.bulk_extraction.preemptible", "yes"),
     "classes.bulk_extraction.preemptible", "must be true or false"),
    ("share above one", _set("classes.bulk_extraction.kv_max_share", 1.5),
     "classes.bulk_extraction.kv_max_share", "must be in (0, 1], got 1.5"),
    ("negative share", _set("classes.document_qa.step_token_share", -0.1),
     "classes.document_qa.step_token_share", "must be in [0, 1], got -0.1"),
    ("zero max share", _set("classes.bulk_extraction.kv_max_share", 0.0),
     "classes.bulk_extraction.kv_max_share", "must be in (0, 1], got 0.0"),
    ("min above max", _set("classes.realtime_risk.kv_min_share", 0.4),
     "classes.realtime_risk.kv_min_share", "larger than kv_max_share"),
    ("kv minimums over one", _both(_set("classes.document_qa.kv_min_share", 0.7),
                                    _set("classes.bulk_extraction.kv_min_share", 0.5)),
     "classes.*.kv_min_share", "sum to 1.3"),
    ("step shares over one", _set("classes.bulk_extraction.step_token_share", 0.5),
     "classes.*.step_token_share", "sum to 1.25"),
    ("zero limit", _set("classes.realtime_risk.max_output_tokens", 0),
     "classes.realtime_risk.max_output_tokens", "must be > 0, got 0"),
    ("negative queue", _set("classes.bulk_extraction.queue_limit", -1),
     "classes.bulk_extraction.queue_limit", "must be > 0, got -1"),
    ("duplicate priority", _set("classes.bulk_extraction.priority", 300),
     "classes.bulk_extraction.priority", "priority must be unique"),
    ("negative latency", _set("classes.realtime_risk.slo.ttft_ms", -5), "classes.realtime_risk.slo.ttft_ms",
     "must be > 0"),
    ("word for latency", _set("classes.realtime_risk.slo.tpot_ms", "fast"), "classes.realtime_risk.slo.tpot_ms",
     'milliseconds or "none"'),
    ("percentile zero", _set("classes.document_qa.slo.percentile", 0), "classes.document_qa.slo.percentile",
     "(0, 100]"),
    ("attainment as percent", _set("classes.document_qa.slo.attainment_goal", 99),
     "classes.document_qa.slo.attainment_goal", "(0, 1]"),
    ("bad class name", _set("classes.Risk-Class", {}), "classes.Risk-Class", "lowercase"),
    ("route to undefined class", _set("classification.routes.risk", "realtime"), "classification.routes.risk",
     "undefined class 'realtime'"),
    ("undefined default class", _set("classification.default_class", "interactive"),
     "classification.default_class", "undefined class 'interactive'"),
    ("undefined heuristic class", _set("classification.long_input_class", "docs"),
     "classification.long_input_class", "undefined class 'docs'"),
    ("threshold above target limit", _set("classification.long_input_tokens", 10000),
     "classification.long_input_tokens", "exceeds max_input_tokens"),
    ("no classes", _set("classes", {}), "classes", "at least one"),
    ("shield below -1", _set("classes.realtime_risk.shield_prefill_tokens", -2),
     "classes.realtime_risk.shield_prefill_tokens", "must be >= -1, got -2"),
    ("infinite share", _set("classes.document_qa.kv_max_share", float("inf")),
     "classes.document_qa.kv_max_share", "finite"),
    ("number for description", _set("classes.document_qa.description", 3),
     "classes.document_qa.description", "must be a string"),
    ("class given as a value", _set("classes.realtime_risk", 1), "classes.realtime_risk", "must be a table"),
    ("route given as a number", _set("classification.routes.risk", 1), "classification.routes.risk",
     "must be a string"),
    ("missing isolation key", _delete("classes.realtime_risk.prefill_isolation"),
     "classes.realtime_risk.prefill_isolation", "missing required key"),
]


@pytest.mark.parametrize(("mutate", "key", "problem"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_policy_file_names_file_key_and_problem(
    write_policy: Callable[..., Path], mutate: Callable[[dict[str, Any]], None], key: str, problem: str
) -> None:
    path = write_policy(mutate)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert problem in message, message
    assert (err.value.source, err.value.key) == (str(path), key)


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[classes.realtime_risk\npriority = 1\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="not valid TOML") as err:
        load_policy(path)
    assert str(err.value).startswith(f"{path}: ")
    assert "line 1" in str(err.value)


def test_a_default_temperature_the_engine_cannot_sample_with_is_refused(write_policy: Callable[..., Path]) -> None:
    from engine.request import MIN_TEMPERATURE
    from policies import loader

    assert loader.MIN_TEMPERATURE == MIN_TEMPERATURE  # one bound, written in both layers
    with pytest.raises(PolicyError, match=r"classes\.document_qa\.default_temperature"):
        load_policy(write_policy(_set("classes.document_qa.default_temperature", 0.001)))
    assert load_policy(write_policy(_set("classes.document_qa.default_temperature", 0.0))) is not None


def test_routing_and_lease_knobs_are_read_and_checked(write_policy: Callable[..., Path]) -> None:
    policy = load_policy()
    assert policy.get("document_qa").routing.value == "affinity" and policy.get("document_qa").kv_lease_s == 900
    assert policy.get("bulk_extraction").routing.value == "least_kv" and policy.get("bulk_extraction").kv_lease_s == 0
    assert policy.routing.probe_interval_s == 1.0

    def bad_strategy(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["routing"] = "random"

    with pytest.raises(PolicyError, match=r"classes.realtime_risk.routing: must be one of 'affinity'"):
        load_policy(write_policy(bad_strategy))

    def bad_lease(d: dict[str, Any]) -> None:
        d["classes"]["document_qa"]["kv_lease_s"] = -1

    with pytest.raises(PolicyError, match=r"classes.document_qa.kv_lease_s: must be >= 0"):
        load_policy(write_policy(bad_lease))

    def no_factor(d: dict[str, Any]) -> None:
        d["routing"]["load_factor"] = 0.5

    with pytest.raises(PolicyError, match=r"routing.load_factor: must be >= 1"):
        load_policy(write_policy(no_factor))
