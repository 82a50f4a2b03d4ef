"""The one human line `finserve up` prints when the stack can answer: "finserve ready at URL (key: ...)".

After the banner the gateway logs only structured lines (JSON when stderr is not a terminal), and loading
the model takes a while; a person needs to see when the URL starts answering. A daemon thread polls the
gateway's /readyz (the engine loaded and the database answering) and prints the line once, on stderr.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable

POLL_S = 0.5


def announce_when_ready(url: str, key: str, *, write: Callable[[str], None] | None = None,
                        poll_s: float = POLL_S) -> threading.Event:
    """Starts the poller; returns an event that stops it (set it when the server stops)."""
    stop = threading.Event()
    out = write or _stderr_line

    def run() -> None:
        import httpx

        while not stop.is_set():
            try:
                if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                    out(f"finserve ready at {url} (key: {key})")
                    return
            except httpx.TransportError:
                pass  # not listening yet
            stop.wait(poll_s)

    threading.Thread(target=run, name="finserve-ready", daemon=True).start()
    return stop


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
