"""Errors of the policies package."""
from __future__ import annotations


class PolicyError(ValueError):
    """A policy file or a classification request is invalid.

    str(error) is "<source>: <key>: <problem>" for file errors, so a failed start-up
    says exactly what to fix; `source`, `key` and `problem` are also kept separately.
    """

    def __init__(self, problem: str, *, source: str | None = None, key: str | None = None) -> None:
        self.problem = problem
        self.source = source
        self.key = key
        super().__init__(": ".join(part for part in (source, key, problem) if part))


class UnknownWorkloadClass(PolicyError):
    """A request (or its tenant) names a class the policy does not define.

    The message names no file: the gateway shows it to clients as 400 unknown_workload_class.
    """

    def __init__(self, workload_class: str, known: list[str], *, origin: str) -> None:
        self.workload_class = workload_class
        self.origin = origin  # "explicit" (the request) or "tenant" (the tenant's default)
        where = "requested" if origin == "explicit" else "tenant default"
        super().__init__(f"unknown workload class {workload_class!r} ({where}); known classes: {', '.join(known)}")
