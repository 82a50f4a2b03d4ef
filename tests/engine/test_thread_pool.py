"""The kernels' own thread pool (kernels/decode_step.c, parallel_for): every call returns with each of its
tasks run exactly once and finished. A worker that read the next call's task count while the ticket was
still the last call's used to claim a task past the end and count it done in the next call, which then
returned with a task still running (the native decode step's logits were garbage about once per CI run,
tests/engine/test_native_step.py). About 10 of 2,000,000 calls showed it on a 2-vCPU AMD EPYC; these
checks run enough calls to catch it most times on such a machine, and must find none."""
from __future__ import annotations

import pytest

from engine.model import cpu_kernels

VARIANTS = cpu_kernels.supported_variants()


@pytest.mark.skipif(not VARIANTS, reason="native kernels not built")
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("threads", [2, 3])
def test_every_pool_call_returns_with_each_task_run_exactly_once(isa: str, threads: int) -> None:
    lib = cpu_kernels.load_variant(isa)
    assert lib is not None
    calls = 400_000
    assert lib.fs_pool_check(calls, threads) == 0

