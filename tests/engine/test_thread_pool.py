"""The kernels' own thread pool (kernels/pool.c, fs_parallel_for): every call returns with each of its
tasks run exactly once and finished. A worker that read the next call's task count while the ticket was
still the last call's used to claim a task past the end and count it done in the next call, which then
returned with a task still running (the native decode step's logits were garbage about once per CI run,
tests/engine/test_native_step.py). About 10 of 2,000,000 calls showed it on a 2-vCPU AMD EPYC; these
checks run enough calls to catch it most times on such a machine, and must find none."""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import pytest
import torch

from engine.model import cpu_kernels
from engine.model.kernel_abi import KernelFormat

TEST_LIB = cpu_kernels.test_library()  # the pool check is a test hook: the test library exports it


@pytest.mark.skipif(TEST_LIB is None, reason="native kernels not built")
@pytest.mark.parametrize("threads", [2, 3])
def test_every_pool_call_returns_with_each_task_run_exactly_once(threads: int) -> None:
    assert TEST_LIB is not None
    calls = 400_000
    assert TEST_LIB.fs_pool_check(calls, threads) == 0



def _allowed_cpus(status: str) -> set[int]:
    """Cpus_allowed_list of a /proc/.../status text ("0-3,6") as a set."""
    text = next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


@pytest.mark.skipif(TEST_LIB is None or len(os.sched_getaffinity(0)) < 2, reason="native kernels or a second CPU missing")
def test_the_pools_workers_keep_off_the_calling_threads_cpu() -> None:
    """With one core busy, the OS put the thread that drives every phase on the busy core about half the time (three
    runnable threads on two cores); the pool's workers now leave the caller's CPU to it (pool.c
    keep_off_caller): after a call from a thread on CPU c, a worker may run on every CPU it was allowed but c."""
    lib = TEST_LIB
    assert lib is not None
    allowed = os.sched_getaffinity(0)
    assert lib.fs_pool_check(10, 2) == 0  # the worker exists, started with every CPU allowed
    n, k = 64, 32  # 4 weight groups: 4 tasks, handed to the pool
    packed = torch.zeros(n * k, dtype=torch.uint8)
    scales = torch.zeros(n * k // 32, dtype=torch.float16)
    out = torch.empty(n, k)
    w = cpu_kernels.qmat(KernelFormat.INT8, packed, scales, None, n, k)
    target = min(allowed)
    os.sched_setaffinity(0, {target})  # this thread only: the CPU the next calls note is known
    masks: list[set[int]] = []
    try:
        for _ in range(200):  # the worker re-pins when it wakes for a call's tasks, which may be after the call returned
            lib.fs_dequant(ctypes.byref(w), out.data_ptr(), 2)
            masks = [_allowed_cpus(Path(f"/proc/self/task/{tid}/status").read_text())
                     for tid in os.listdir("/proc/self/task")]
            if allowed - {target} in masks:
                break
            time.sleep(0.01)
    finally:
        os.sched_setaffinity(0, allowed)
    assert allowed - {target} in masks
