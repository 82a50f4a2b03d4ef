"""Headless Chromium for the rendered-report tests: Debian's `chromium`, installed when missing.

On a fresh CI machine (root, Debian) the first browser test runs apt-get; where that
is impossible (not root, no apt-get, no network) the tests skip and say why.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.system_packages import find_or_install

# No GPU, no sandbox (containers run as root), and nothing that reaches the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
RUN_TIMEOUT_S = 120


def find_or_install_chromium() -> tuple[str | None, str]:
    """(path to chromium, "") or (None, why it cannot be had)."""
    return find_or_install("chromium", "chromium")


def run_chromium(binary: str, work: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless run on `page` with a new, empty profile under `work`."""
    profile = Path(work) / f"profile-{len(list(Path(work).glob('profile-*')))}"
    profile.mkdir(parents=True)
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True)
