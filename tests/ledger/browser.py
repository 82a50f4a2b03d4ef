"""Headless Chromium for the rendered-report tests: Debian's `chromium`, installed when missing.

On a fresh CI machine (root, Debian) the first browser test runs apt-get; where that
is impossible (not root, no apt-get, no network) the tests skip and say why.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# No GPU, no sandbox (containers run as root), and nothing that reaches the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
INSTALL_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 120


def find_or_install_chromium() -> tuple[str | None, str]:
    """(path to chromium, "") or (None, why it cannot be had)."""
    path = shutil.which("chromium")
    if path:
        return path, ""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "chromium is not installed and the tests do not run as root to install it: apt-get install chromium"
    if shutil.which("apt-get") is None:
        return None, "chromium is not installed and this machine has no apt-get to install Debian's chromium package"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"`{' '.join(cmd)}` took over {INSTALL_TIMEOUT_S} s"
        if done.returncode != 0:
            return None, f"`{' '.join(cmd)}` failed with exit code {done.returncode}: {done.stderr.strip()[-400:]}"
    path = shutil.which("chromium")
    return (path, "") if path else (None, "apt-get installed chromium, but there is no `chromium` on PATH")


def run_chromium(binary: str, work: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless run on `page` with a new, empty profile under `work`."""
    profile = Path(work) / f"profile-{len(list(Path(work).glob('profile-*')))}"
    profile.mkdir(parents=True)
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True)
