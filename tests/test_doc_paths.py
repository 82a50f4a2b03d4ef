"""The files the docs name exist: every repository path in backticks in docs/ARCHITECTURE.md (the layout and the
"Where to make common changes" recipes) and README.md, and every relative Markdown link of the docs.

A path (`policies/model.py`, `gateway/inference/`, `default.toml`) must exist from the repository root, or be the
tail of a file's or folder's path when the text names it relative to a package it is describing
(`kv_cache/leases.py` under engine/, `kernels/decode_step.c` under engine/model/).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_size import ROOT

DOCS = ("docs/ARCHITECTURE.md", "README.md")
_PATH = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*(?:/|\.(?:py|toml|md|yml|yaml|json|c|h|ndjson)))`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def named_paths(text: str) -> list[str]:
    """The backticked repository paths of a Markdown text (a folder ends in `/`; things like `a.b` are skipped)."""
    return [m for m in _PATH.findall(text) if not m.startswith(".")]


def missing(root: Path, paths: list[str]) -> list[str]:
    """The paths that name nothing: neither from `root` nor as the tail of a repository file's or folder's path."""
    tops = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    every = {"/" + str(p.relative_to(root)) + ("/" if p.is_dir() else "") for d in tops for p in [d, *d.rglob("*")]}
    return [path for path in paths if not (root / path).exists() and not any(e.endswith("/" + path) for e in every)]


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc: str) -> None:
    assert missing(ROOT, named_paths((ROOT / doc).read_text(encoding="utf-8"))) == []


def test_every_relative_link_of_the_docs_resolves() -> None:
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _LINK.findall(doc.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
                bad.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert bad == []


def test_the_path_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "engine" / "kv_cache").mkdir(parents=True)
    (tmp_path / "engine" / "kv_cache" / "leases.py").write_text("")
    text = "`engine/kv_cache/leases.py`, `kv_cache/leases.py`, `leases.py`, `engine/gone.py`, `Settings.model_id`"
    assert named_paths(text) == ["engine/kv_cache/leases.py", "kv_cache/leases.py", "leases.py", "engine/gone.py"]
    assert missing(tmp_path, named_paths(text)) == ["engine/gone.py"]
