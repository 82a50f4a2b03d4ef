"""Builds the native CPU kernels at install time (`pip install -e .`), once per ISA variant.

Each variant is a plain shared library (loaded with ctypes, not imported): `generic` (no ISA
flags, runs anywhere), `avx2`, `avx512` and `amx` (avx512 with AMX tiles for prefill).
engine/model/cpu_kernels.py asks the CPU (CPUID, through the generic library) which one it can run, so a
build shared between machines never executes instructions the CPU lacks. A variant the compiler cannot
build (another architecture, an old compiler) is skipped; the engine then uses the next one down, or the
torch paths. One more library, `test`, is the generic code with the test hooks (kernels/hooks.c: the
lending switches and counters, the pool check); only the tests load it, and no other variant exports them.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class _BuildPerVariant(build_ext):
    """Gives each variant its own object folder: the variants share source names, and objects
    compiled with other ISA flags must never be linked into (or reused by) another variant."""

    def build_extension(self, ext: Extension) -> None:
        base = self.build_temp
        self.build_temp = str(Path(base) / ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = base

_SOURCES = sorted(str(p) for p in Path("engine/model/kernels").glob("*.c"))
# a changed header, or a changed flag here, rebuilds
_HEADERS = sorted(str(p) for p in Path("engine/model/kernels").glob("*.h")) + ["setup.py"]
# -fopenmp-simd: the `omp simd` loop hints only (no OpenMP runtime: the kernels' one thread runtime is pool.c)
_COMMON = ["-O3", "-fopenmp-simd", "-std=c11", "-fno-math-errno", "-fvisibility=hidden"]
_VARIANTS = {
    "generic": [],
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"],
}
_VARIANTS["amx"] = _VARIANTS["avx512"] + ["-mamx-tile", "-mamx-int8"]  # avx512 plus AMX prefill tiles (tiles_amx.c)
_VARIANTS["test"] = ["-DFS_TEST_HOOKS"]  # generic plus the test hooks: loaded by the tests only

setup(
    cmdclass={"build_ext": _BuildPerVariant},
    ext_modules=[
        Extension(
            f"engine.model._kernels_{name}",
            sources=_SOURCES,
            depends=_HEADERS,
            extra_compile_args=_COMMON + flags,
            extra_link_args=["-lm", "-pthread"],
            optional=True,
        )
        for name, flags in _VARIANTS.items()
    ]
)
