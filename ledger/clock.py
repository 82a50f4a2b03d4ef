"""The clock-sync state a gateway records at start (DORA RTS 2024/1774 Art. 12: clocks synchronised to a
documented source), honestly: what a local tool says, or "unknown" when nothing can say.

Asked in order: `chronyc tracking` (chrony: reference, offset, leap status), then `timedatectl show`
(systemd-timesyncd or whatever systemd uses: NTPSynchronized). Neither present or answering (a container
without them, as in CI): source "unknown", synchronized None. The state goes into the chained `start`
event and the `finserve_clock_synchronized` metric; it is not re-checked while the gateway runs.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Any

TIMEOUT_S = 3.0


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _fields(text: str, sep: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def clock_state() -> dict[str, Any]:
    """{"source", "synchronized" (True/False/None), "detail"}: what this machine says about its clock."""
    chrony = _run(["chronyc", "tracking"])
    if chrony:
        f = _fields(chrony, ":")
        leap = f.get("Leap status", "")
        return {"source": "chrony", "synchronized": leap == "Normal",
                "detail": {k: f[k] for k in ("Reference ID", "System time", "Leap status", "Stratum") if k in f}}
    timedatectl = _run(["timedatectl", "show"])
    if timedatectl:
        f = _fields(timedatectl, "=")
        synced = f.get("NTPSynchronized")
        return {"source": "timedatectl", "synchronized": None if synced is None else synced == "yes",
                "detail": {k: f[k] for k in ("NTP", "NTPSynchronized", "Timezone") if k in f}}
    return {"source": "unknown", "synchronized": None,
            "detail": "neither chronyc nor timedatectl is available or answering on this machine"}
