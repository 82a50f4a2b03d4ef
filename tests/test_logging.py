"""core.logging: a library's stdlib record logged with exc_info (Celery's "Unrecoverable error") keeps its traceback."""
from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import logging
from core.logging import configure_logging
configure_logging(json=True, level="info")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("celery.worker").critical("Unrecoverable error: %r", "x", exc_info=True)
"""


def test_a_stdlib_record_with_exc_info_carries_its_traceback_as_text():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert line["event"] == "Unrecoverable error: 'x'" and line["level"] == "critical"
    assert "Traceback (most recent call last)" in line["exception"] and "ZeroDivisionError" in line["exception"]
    assert "<traceback object" not in done.stderr
