"""The native kernels' variants, declared once and torch-free: engine/model/cpu_kernels.py builds and loads them,
engine/config.py and core/settings.py check names against them."""
from __future__ import annotations

# ascending: each runs wherever the next one does (setup.py builds one library per name)
KERNEL_ISAS = ("generic", "avx2", "avx512", "amx")
