"""Fixtures of the engine tests."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.model import cpu_kernels


@pytest.fixture(autouse=True)
def _default_kernels() -> Iterator[None]:
    """Every test ends with the process's default kernel choice. An engine sets the choice process-wide from its
    config (cpu_kernels.configure: native_kernels, kernel_isa), so a test that built one with the kernels off or a
    forced ISA would otherwise leave the next test on another path (test_paged_attention.py after test_kv_dtype.py
    found no library)."""
    yield
    cpu_kernels.configure()


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Callable[[str], Path]:
    """`family_dir(case)`: the tiny random model of test_family_parity.CASES[case], written once a session and shared
    by the tests that only read it (parity, native step, batch invariance). Its seed is the case's index in CASES, so
    a case is the same model whichever test or file asks first."""
    from tests.engine.family_models import write_family  # imports transformers (skips where it is missing)
    from tests.engine.test_family_parity import CASES

    made: dict[str, Path] = {}

    def make(case: str) -> Path:
        if case not in made:
            cls, kw = CASES[case]
            made[case] = write_family(tmp_path_factory.mktemp(case), cls, default_model_dir, seed=list(CASES).index(case),
                                      **kw)
        return made[case]

    return make
