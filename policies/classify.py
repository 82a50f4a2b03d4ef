"""Decide a request's workload class with ordered rules, and say which rule decided.

Order (first rule that applies wins): an explicit class on the request, the route's
class, the tenant's default class, the long-input heuristic, the policy's default.
The rule name is logged and stored in the ledger so operators can see why a request
was served as it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from policies.errors import UnknownWorkloadClass
from policies.model import Policy

Rule = Literal["explicit", "route", "tenant", "heuristic", "default"]


@dataclass(frozen=True)
class Classification:
    workload_class: str
    rule: Rule  # which rule decided


def classify(
    policy: Policy,
    *,
    explicit: str | None,
    route: str | None,
    tenant_default: str | None,
    input_tokens: int,
) -> Classification:
    """Raises UnknownWorkloadClass (a PolicyError) for an explicit or tenant class the policy lacks.

    Empty strings count as absent (an empty `X-Workload-Class:` header asks for nothing).
    A route missing from the policy's routes falls through to the next rule.
    """
    rules = policy.classification
    if explicit:
        return Classification(_known(policy, explicit, "explicit"), "explicit")
    if route and route in rules.routes:
        return Classification(rules.routes[route], "route")
    if tenant_default:
        return Classification(_known(policy, tenant_default, "tenant"), "tenant")
    if input_tokens >= rules.long_input_tokens:
        return Classification(rules.long_input_class, "heuristic")
    return Classification(rules.default_class, "default")


def _known(policy: Policy, name: str, origin: str) -> str:
    if name not in policy.classes:
        raise UnknownWorkloadClass(name, sorted(policy.classes), origin=origin)
    return name
