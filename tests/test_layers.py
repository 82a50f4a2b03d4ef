"""Imports flow one way: policies <- engine <- core <- ledger <- (gateway, jobs) <- (finserve, bench);
textspans (text and schema helpers) imports nothing and sits below gateway and jobs.

Read from the source with `ast` (nothing is imported), so the test also sees imports inside
functions. A package may import itself and any package below it, never a sibling or one above.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("policies", "engine", "core", "ledger", "textspans", "gateway", "jobs", "migrations", "finserve", "bench")
# What each package may import from the project (besides itself).
ALLOWED: dict[str, set[str]] = {
    "policies": set(),
    "engine": {"policies"},
    "core": {"policies", "engine", "migrations"},
    "migrations": {"core", "engine", "policies"},
    # The request ledger (rows, chain, writer, verify, reports): below gateway and jobs, above core.
    "ledger": {"policies", "engine", "core"},
    # Spans, sentences, grounded schemas: plain text and schema code that gateway and jobs both use.
    "textspans": set(),
    "gateway": {"policies", "engine", "core", "ledger", "textspans"},
    "jobs": {"policies", "engine", "core", "ledger", "textspans"},
    "finserve": {"policies", "engine", "core", "ledger", "textspans", "gateway", "jobs", "bench", "migrations"},
    "bench": {"policies", "engine", "core", "ledger", "textspans", "gateway", "jobs", "finserve"},
}
# Inside the engine, the scheduler and the KV cache stay free of torch (unit-tested without it).
TORCH_FREE = ("engine/scheduler.py", "engine/kv_cache", "engine/request_queue.py", "engine/token_budget.py",
              "engine/admission.py", "policies")
# ... and no tracing library: the gateway makes the engine's spans from its timestamps (gateway/spans.py).
WEB_DB_QUEUE = {"fastapi", "starlette", "sqlalchemy", "celery", "redis", "alembic", "httpx", "uvicorn", "opentelemetry"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def files_of(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package: str) -> None:
    bad = []
    for path in files_of(package):
        for root in imported_roots(path) & set(PROJECT):
            if root != package and root not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {root}")
    assert not bad, "\n".join(bad)


def test_engine_imports_no_web_database_or_queue_library() -> None:
    bad = [f"{p.relative_to(ROOT)} imports {r}" for p in files_of("engine") for r in imported_roots(p) & WEB_DB_QUEUE]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("where", TORCH_FREE)
def test_scheduler_kv_cache_and_policies_import_no_torch(where: str) -> None:
    target = ROOT / where
    paths = [target] if target.is_file() else sorted(target.rglob("*.py"))
    bad = [str(p.relative_to(ROOT)) for p in paths if "torch" in imported_roots(p)]
    assert not bad, bad


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The rule above must be able to fail: a gateway module importing jobs is caught."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from jobs.routes import router\n    return router\n")
    assert "jobs" in imported_roots(module) and "jobs" not in ALLOWED["gateway"]


def test_only_the_settings_object_reads_the_environment() -> None:
    """`os.environ` / `os.getenv` appear only in core/settings.py and the stack helper that builds children's
    environments (engine/__init__.py once set OpenMP's wait policy for the whole process: no longer)."""
    allowed = {"core/settings.py", "finserve/stack.py"}
    bad = []
    for package in ("policies", "engine", "core", "gateway", "jobs", "finserve"):
        for path in files_of(package):
            rel = str(path.relative_to(ROOT))
            text = path.read_text()
            if rel not in allowed and ("os.environ" in text or "os.getenv" in text):
                bad.append(rel)
    assert not bad, bad


def test_importing_the_engine_leaves_the_environment_alone() -> None:
    """Importing the engine (and loading torch) sets no OMP_*/GOMP_*/KMP_* variable: a child process, such as
    a benchmark's peer, inherits exactly what this process was given."""
    import subprocess
    import sys

    code = ("import os; before = dict(os.environ); import engine, engine.engine, torch; "
            "changed = {k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)}; "
            "print(sorted(k for k in changed if k.startswith(('OMP_', 'GOMP_', 'KMP_'))))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
