"""Which workload class a job's items run in: asked of the policy once, at submission, never a literal.

The class is what the policy routes `extraction` to (its [classification.routes] table, through
policies.classify like every request's class). Deciding it at submission lets the route refuse
a key that may not use it (403 class_forbidden) and check max_tokens against it (400) before
anything is stored; the job keeps the class, and its items ask for exactly that class.
"""
from __future__ import annotations

from core.keys import KeyInfo
from jobs.ingest import IngestError
from policies import ClassPolicy, Policy, UnknownWorkloadClass, classify

EXTRACTION_ROUTE = "extraction"  # the policy's route name for bulk extraction
BATCH_ROUTE = "batch"  # the policy's route name for OpenAI batches (jobs/batch.py)


def extraction_class(policy: Policy, key: KeyInfo) -> ClassPolicy:
    """The class `key`'s extraction jobs run in; IngestError when the key may not use it."""
    return job_class(policy, key, EXTRACTION_ROUTE, "extraction jobs")


def batch_class(policy: Policy, key: KeyInfo) -> ClassPolicy:
    """The class every line of `key`'s batches runs in; IngestError when the key may not use it."""
    return job_class(policy, key, BATCH_ROUTE, "batches")


def job_class(policy: Policy, key: KeyInfo, route: str, what: str) -> ClassPolicy:
    """The class the policy routes `route` to for `key`; IngestError when the key may not use it.

    Items are not tokenized at submission, so a policy without the route falls through to the
    key's default class, then the policy's default (never the length heuristic).
    """
    try:
        decided = classify(policy, explicit=None, route=route, tenant_default=key.default_class, input_tokens=0)
    except UnknownWorkloadClass as exc:
        raise IngestError("unknown_workload_class", str(exc), 400) from None
    cls = policy.get(decided.workload_class)
    if not key.allows(cls.name):
        raise IngestError("class_forbidden", f"this API key may not use class {cls.name!r}, which runs {what}", 403)
    return cls
