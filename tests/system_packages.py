"""Debian packages some tests need (promtool, chromium): installed on first use where we are root.

CI runs as root on a fresh machine of this kind, so the suite installs what it needs itself; where
that cannot happen (not root, no apt-get, no package index) the test is skipped with the reason.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

INSTALL_TIMEOUT_S = 1800


def find_or_install(binary: str, package: str) -> tuple[str | None, str]:
    """(path of `binary`, "") -- installing Debian's `package` when missing -- or (None, why it cannot be had)."""
    path = shutil.which(binary)
    if path:
        return path, ""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, f"{binary} is not installed and the tests do not run as root to install it: apt-get install {package}"
    if shutil.which("apt-get") is None:
        return None, f"{binary} is not installed and this machine has no apt-get to install Debian's {package}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"`{' '.join(cmd)}` took over {INSTALL_TIMEOUT_S} s"
        if done.returncode != 0:
            return None, f"`{' '.join(cmd)}` failed with exit code {done.returncode}: {done.stderr.strip()[-400:]}"
    path = shutil.which(binary)
    return (path, "") if path else (None, f"apt-get installed {package}, but there is no `{binary}` on PATH")


def ensure_binary(binary: str, package: str) -> str:
    """Path of `binary`, installing `package` when missing; pytest.skip with the reason if impossible."""
    path, why = find_or_install(binary, package)
    if path is None:
        pytest.skip(why)
    return path
