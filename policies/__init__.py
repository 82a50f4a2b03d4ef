"""Workload classes as data: SLO targets, priorities, budgets, classification rules.

No torch, no web framework: this package is imported by everything else.
"""
from policies.capacity import check_against_model
from policies.classify import Classification, classify
from policies.errors import PolicyError, UnknownWorkloadClass
from policies.loader import load_policy, policy_from_dict
from policies.model import ClassificationRules, ClassPolicy, Policy, RoutingPolicy, RoutingStrategy, SLOTargets

__all__ = [
    "ClassPolicy",
    "Classification",
    "ClassificationRules",
    "Policy",
    "PolicyError",
    "RoutingPolicy",
    "RoutingStrategy",
    "SLOTargets",
    "UnknownWorkloadClass",
    "check_against_model",
    "classify",
    "load_policy",
    "policy_from_dict",
]
