"""Files small enough to hold in one's head (../STYLE.md: a file past ~400 lines is usually two concepts).

Every Python, C and C header file of the repository (the packages, the tests, setup.py, the native kernels) has at
most MAX_LINES lines; hidden folders (.venv, .finserve, .git) are not the project's code and are skipped.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
SUFFIXES = (".py", ".c", ".h")


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def source_files(root: Path) -> list[Path]:
    """The repository's own source files (hidden folders are never walked: a .venv holds thousands)."""
    found = [p for p in root.iterdir() if p.suffix in SUFFIXES and p.is_file()]
    for top in sorted(d for d in root.iterdir() if d.is_dir() and not _skipped(d.name)):
        found += [p for p in top.rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and not any(_skipped(part) for part in p.relative_to(root).parts)]
    return sorted(found)


def python_files(root: Path) -> list[Path]:
    return [p for p in source_files(root) if p.suffix == ".py"]


def too_long(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Relative path -> line count of each source file under `root` longer than `limit` lines."""
    counts = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in source_files(root)}
    return {path: n for path, n in counts.items() if n > limit}


def test_no_source_file_is_over_the_limit() -> None:
    assert not too_long(ROOT), f"split these by responsibility (over {MAX_LINES} lines): {too_long(ROOT)}"


def test_the_size_check_sees_long_python_and_c_files_and_skips_hidden_folders(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg" / "kernel.c").write_text("int x;\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "kernel.h").write_text("int y;\n" * (MAX_LINES + 2))
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * (MAX_LINES + 1))
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "vendored.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / ".venv" / "vendored.c").write_text("int x;\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == {"pkg/long.py": MAX_LINES + 1, "pkg/kernel.c": MAX_LINES + 1,
                                  "pkg/kernel.h": MAX_LINES + 2}
    files = source_files(ROOT)
    assert len(files) > 100 and any(p.suffix == ".c" for p in files)  # it does walk the repository
