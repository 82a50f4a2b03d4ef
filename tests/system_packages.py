"""Debian packages some tests need (promtool, chromium): installed on first use where we are root.

CI runs as root on a fresh machine of this kind, so the suite installs what it needs itself; where
that cannot happen (not root, no apt-get, no package index) the test is skipped with the reason.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

_APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def ensure_binary(binary: str, package: str) -> str:
    """Path of `binary`, installing Debian's `package` when it is missing; pytest.skip if impossible."""
    found = shutil.which(binary)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{binary} is not installed and cannot be installed here (apt-get install {package} as root)")
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
    if subprocess.run(install, env=_APT_ENV, capture_output=True, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=_APT_ENV, capture_output=True, timeout=600)
        result = subprocess.run(install, env=_APT_ENV, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.skip(f"apt-get install {package} failed: {result.stderr[-300:]}")
    found = shutil.which(binary)
    if not found:
        pytest.skip(f"{package} installed but {binary} is not on PATH")
    return found
