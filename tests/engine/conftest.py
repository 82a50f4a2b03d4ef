"""Fixtures of the engine tests."""
from __future__ import annotations

from collections.abc import Iterator

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
