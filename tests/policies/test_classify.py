"""Classification follows explicit > route > tenant > heuristic > default and reports the deciding rule."""
from __future__ import annotations

import pytest

from policies import Classification, Policy, PolicyError, UnknownWorkloadClass, classify, load_policy


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def _classify(policy: Policy, *, explicit: str | None = None, route: str | None = None,
              tenant_default: str | None = None, input_tokens: int = 100) -> Classification:
    return classify(policy, explicit=explicit, route=route, tenant_default=tenant_default, input_tokens=input_tokens)


def test_explicit_class_beats_every_other_rule(policy: Policy) -> None:
    got = _classify(policy, explicit="bulk_extraction", route="risk", tenant_default="document_qa", input_tokens=5000)
    assert got == Classification("bulk_extraction", "explicit")


def test_route_beats_tenant_and_heuristic(policy: Policy) -> None:
    got = _classify(policy, route="risk", tenant_default="bulk_extraction", input_tokens=5000)
    assert got == Classification("realtime_risk", "route")


def test_generic_route_falls_through_to_tenant(policy: Policy) -> None:
    got = _classify(policy, route="chat", tenant_default="realtime_risk", input_tokens=5000)
    assert got == Classification("realtime_risk", "tenant")


def test_long_input_goes_to_the_heuristic_class_from_the_threshold_on(policy: Policy) -> None:
    threshold = policy.classification.long_input_tokens
    policy_default = policy.classification.default_class
    assert _classify(policy, route="completions", input_tokens=threshold) == Classification(
        policy.classification.long_input_class, "heuristic")
    assert _classify(policy, route="completions", input_tokens=threshold - 1) == Classification(
        policy_default, "default")


def test_no_rule_gives_the_default_class(policy: Policy) -> None:
    assert _classify(policy) == Classification(policy.classification.default_class, "default")


def test_empty_strings_count_as_absent(policy: Policy) -> None:
    assert _classify(policy, explicit="", route="", tenant_default="").rule == "default"


@pytest.mark.parametrize(("kwargs", "origin"), [
    ({"explicit": "realtime", "route": "risk"}, "explicit"),
    ({"tenant_default": "gold_tier", "route": "chat"}, "tenant"),
])
def test_unknown_class_is_a_policy_error_naming_the_class_not_the_file(
    policy: Policy, kwargs: dict[str, str], origin: str
) -> None:
    with pytest.raises(UnknownWorkloadClass) as err:
        _classify(policy, **kwargs)
    assert isinstance(err.value, PolicyError)
    assert err.value.origin == origin
    message = str(err.value)
    assert repr(kwargs.get("explicit") or kwargs.get("tenant_default")) in message
    assert "realtime_risk" in message  # lists the classes that do exist
    assert policy.source not in message  # shown to API clients: no server paths
