"""`finserve up`'s human line: printed once the gateway answers /readyz, never before (stack/announce.py)."""
from __future__ import annotations

import socket
import time

from stack.announce import announce_when_ready
from tests.gateway.conftest import LiveServer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ready_line_once_the_gateway_answers(live_server: LiveServer) -> None:
    lines: list[str] = []
    stop = announce_when_ready(live_server.url, "fsk_dev", write=lines.append, poll_s=0.05)
    deadline = time.monotonic() + 10
    while not lines and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    assert lines == [f"finserve ready at {live_server.url} (key: fsk_dev)"]


def test_nothing_while_nothing_answers() -> None:
    lines: list[str] = []
    stop = announce_when_ready(f"http://127.0.0.1:{_closed_port()}", "k", write=lines.append, poll_s=0.05)
    time.sleep(0.5)
    stop.set()
    assert lines == []
