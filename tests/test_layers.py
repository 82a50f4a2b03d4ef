"""Imports flow one way: util <- policies <- engine <- core <- (ledger, migrations) <- (gateway, jobs) <- stack <- evals
<- bench <- finserve; textspans (text and schema helpers) imports only util and sits below gateway and jobs;
contracts (the contract text finders) imports textspans and the engine's schema checks and sits below jobs.

Read from the source with `ast` (nothing is imported), so the test also sees imports inside
functions. A package may import itself and any package below it, never a sibling or one above; and no
cycle anywhere: neither between packages nor between the modules of one package. Imports under
`if TYPE_CHECKING:` are left out of the module graph (they never run, so they cannot make an import cycle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("util", "policies", "engine", "core", "ledger", "textspans", "contracts", "gateway", "jobs", "migrations",
           "stack", "finserve", "evals", "bench")
# What each package may import from the project (besides itself).
ALLOWED: dict[str, set[str]] = {
    # Generic helpers (a file lock, a JSON depth check): the standard library only; every package may use them.
    "util": set(),
    "policies": {"util"},
    "engine": {"util", "policies"},
    # core runs the Alembic chain from the migrations/ folder by path (core/db/migrate.py), importing none of it.
    "core": {"util", "policies", "engine"},
    "migrations": {"util", "core", "engine", "policies"},
    # The request ledger (rows, chain, writer, verify, reports): below gateway and jobs, above core.
    "ledger": {"util", "policies", "engine", "core"},
    # Spans, sentences, grounded schemas: plain text and schema code that gateway and jobs both use.
    "textspans": {"util"},
    # What a contract says (amounts, dates, names, candidates) and the job schema's x-* keywords: plain text code
    # on the engine's schema checks, no web, queue or database.
    "contracts": {"util", "policies", "engine", "textspans"},
    "gateway": {"util", "policies", "engine", "core", "ledger", "textspans"},
    "jobs": {"util", "policies", "engine", "core", "ledger", "textspans", "contracts"},
    # Process wiring the CLI and the benchmarks share: the app with the jobs routes, starting workers/engines/the
    # gateway in a thread, supervising `finserve up`, resolving the model folder.
    "stack": {"util", "policies", "engine", "core", "ledger", "textspans", "contracts", "gateway", "jobs"},
    # The evaluations and measurements the shipped commands run (`finserve eval`, `bench quality`, `sweep`).
    "evals": {"util", "policies", "engine", "core", "ledger", "textspans", "contracts", "gateway", "jobs", "stack"},
    # The developer benchmarks: a checkout only, not in the wheel (`finserve bench` says so when it is missing).
    "bench": {"util", "policies", "engine", "core", "ledger", "textspans", "contracts", "gateway", "jobs", "stack",
              "evals"},
    "finserve": {"util", "policies", "engine", "core", "ledger", "textspans", "contracts", "gateway", "jobs",
                 "migrations", "stack", "evals", "bench"},
}
# Inside the engine, the scheduler and the KV cache stay free of torch (unit-tested without it).
TORCH_FREE = ("engine/sched", "engine/kv_cache", "engine/speculative/draft.py", "engine/speculative/ngram.py",
              "engine/speculative/proposer.py", "policies")
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


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of the tree but the bodies of `if TYPE_CHECKING:` (their `else:` still runs)."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def module_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from a import b` names module a.b when it is one, else a)."""
    paths = {_module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}

    def resolve(dotted: str) -> str | None:
        parts = dotted.split(".")
        while parts and ".".join(parts) not in paths:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str | None] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in paths else resolve(base))
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _cycle_report(graph: dict[str, set[str]]) -> str:
    return "\n".join(" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c)
                     for c in cycles(graph))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package: str) -> None:
    bad = []
    for path in files_of(package):
        for root in imported_roots(path) & set(PROJECT):
            if root != package and root not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {root}")
    assert not bad, "\n".join(bad)


def test_the_package_table_has_no_cycle() -> None:
    assert not cycles(ALLOWED), cycles(ALLOWED)


def test_no_import_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph(ROOT, PROJECT).items():
        graph.setdefault(module.split(".")[0], set()).update(t.split(".")[0] for t in targets)
    for package, targets in graph.items():
        targets.discard(package)
    assert not cycles(graph), _cycle_report(graph)


def test_no_import_cycle_between_modules() -> None:
    """Also inside one package: a module that imports another which (through any path) imports it back."""
    graph = module_graph(ROOT, PROJECT)
    assert not cycles(graph), _cycle_report(graph)


def test_the_cycle_checker_finds_a_planted_cycle(tmp_path: Path) -> None:
    """It must be able to fail: a three-module loop inside one package (absolute, relative and `import a.b`
    forms), next to a pair that only meets under `if TYPE_CHECKING:`, which is not a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import c\n    return c\n")
    (pkg / "sub" / "c.py").write_text("from .. import b\n")
    (pkg / "b.py").write_text("import pkg.a\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import hinted\n")
    (pkg / "hinted.py").write_text("from pkg.typed import x\n")
    graph = module_graph(tmp_path, ("pkg",))
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert graph["pkg.hinted"] == {"pkg.typed"} and graph["pkg.typed"] == set()


@pytest.mark.parametrize("package", ["util", "policies", "engine", "textspans", "contracts"])
def test_the_lower_packages_import_no_web_database_or_queue_library(package: str) -> None:
    bad = [f"{p.relative_to(ROOT)} imports {r}" for p in files_of(package) for r in imported_roots(p) & WEB_DB_QUEUE]
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
    allowed = {"core/settings.py", "stack/processes.py"}
    bad = []
    for package in ("util", "policies", "engine", "core", "ledger", "gateway", "jobs", "stack", "finserve"):
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
