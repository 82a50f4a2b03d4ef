"""Files small enough to hold in one's head (../STYLE.md: a file past ~400 lines is usually two concepts).

Every Python file of the repository (the packages, the tests, setup.py) has at most MAX_LINES lines; hidden
folders (.venv, .finserve, .git) are not the project's code and are skipped.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def python_files(root: Path) -> list[Path]:
    """The repository's own Python files (hidden folders are never walked: a .venv holds thousands)."""
    found = list(root.glob("*.py"))
    for top in sorted(d for d in root.iterdir() if d.is_dir() and not _skipped(d.name)):
        found += [p for p in top.rglob("*.py") if not any(_skipped(part) for part in p.relative_to(root).parts)]
    return sorted(found)


def too_long(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Relative path -> line count of each Python file under `root` longer than `limit` lines."""
    counts = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in python_files(root)}
    return {path: n for path, n in counts.items() if n > limit}


def test_no_python_file_is_over_the_limit() -> None:
    assert not too_long(ROOT), f"split these by responsibility (over {MAX_LINES} lines): {too_long(ROOT)}"


def test_the_size_check_sees_a_long_file_and_skips_hidden_folders(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == {"pkg/long.py": MAX_LINES + 1}
    assert len(python_files(ROOT)) > 100  # it does walk the repository
