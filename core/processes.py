"""Stopping a child process the same way everywhere: SIGTERM, a bounded wait, then SIGKILL."""
from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM (a graceful stop: Celery's warm shutdown, uvicorn's drain), then SIGKILL after `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
