"""Fixtures shared by every test area: the prepared default model and tiny random Llama models.

Area-specific fixtures belong in tests/<area>/conftest.py.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes tens of seconds (run by default; deselect with -m 'not slow')")
    config.addinivalue_line("markers", "timing: asserts a wall-clock bound; `make test` runs these alone, after the "
                            "parallel run, so another test process never shares the cores with them")
    # Logging as every finserve process configures it (JSON off a terminal). Left unconfigured, structlog renders a
    # logged exception with rich, every frame's locals included: seconds each, on the event loop of the app under
    # test (an app whose engine fails to load waited in its lifespan for that log line alone).
    from core.logging import configure_logging

    configure_logging(json=True, level="info")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Files holding a test marked slow go first (stable: each file keeps its order): `make test`'s workers take whole
    # files in collection order, so the longest start first and no worker is left on one at the end while the other
    # idles.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def _test_cache() -> Path:
    # Shared across test runs (the conversion takes seconds); CI starts empty and prepares once.
    return Path(os.environ.get("FINSERVE_TEST_CACHE", Path.home() / ".cache" / "finserve-test"))


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as an HF-format folder (prepared once, reused by later runs)."""
    from engine.model.prepare import ensure_default_model  # imported here: tests without models stay light

    return ensure_default_model(home=_test_cache())


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Callable[..., Path]:
    """Factory: make_tiny_model(**write_random_llama kwargs) -> folder; equal kwargs share one folder."""
    from engine.model.random_model import write_random_llama

    made: dict[tuple, Path] = {}

    def make(**kwargs) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in made:
            path = tmp_path_factory.mktemp("tiny_llama")
            made[key] = write_random_llama(path, tokenizer_dir=default_model_dir, **kwargs)
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_model_dir(make_tiny_model: Callable[..., Path]) -> Path:
    """One random 2-layer Llama (hidden 64, 4 heads, 2 KV heads) with the SmolLM2 tokenizer."""
    return make_tiny_model()


@pytest.fixture(scope="session")
def gguf_family(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Callable[[str], tuple[Path, Path]]:
    """Factory: gguf_family(case) -> (a tiny random HF model of the family, the folder imported from the GGUF
    llama.cpp's converter wrote for it); cases in tests/engine/gguf_families.py."""
    from tests.engine.gguf_families import imported_model

    root = tmp_path_factory.mktemp("gguf_families")
    return lambda case: imported_model(root, case, default_model_dir)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], str]:
    """Factory: migrated_sqlite(path) -> the URL of a new SQLite database file at `path`, at the migration chain's head.

    Each is a copy of one database migrated once a session: an Alembic upgrade costs a fraction of a second and
    hundreds of tests each start from a fresh migrated database. The chain itself still runs from an empty database
    in tests/ledger/test_migrations.py, test_batch_migration.py and every test that starts `finserve serve`."""
    from core.db.migrate import upgrade

    template = tmp_path_factory.mktemp("migrated_sqlite") / "template.db"
    assert upgrade(f"sqlite:///{template}") is not None
    # Every connection is closed: the WAL is checkpointed into the file and removed, so the file alone is the database.
    assert not template.with_name(template.name + "-wal").exists()

    def make(path: Path) -> str:
        assert not path.exists(), f"{path} exists: a copy would overwrite a database"
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"

    return make
