"""Issue 45 finding 9: slow and idle connections were never closed (17,618 descriptors held). A real uvicorn server
with finserve's options (core/web/server.py) and its request middleware: a connection that sends nothing, or
trickles a request head, is closed after FINSERVE_HTTP_HEADER_TIMEOUT_S; an idle keep-alive one after
FINSERVE_HTTP_KEEP_ALIVE_S; a body that trickles in gets 408 `request_timeout`; past FINSERVE_HTTP_MAX_CONNECTIONS a
new connection is closed at once. Timeouts are a fraction of a second here; the test asserts what happened, not
how fast."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from core.settings import Settings
from core.web.middleware import RequestContextMiddleware
from core.web.server import uvicorn_options

HEAD_S, KEEP_ALIVE_S, BODY_S = 0.5, 1, 0.5


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, answers its length."""
    if scope["type"] != "http":
        return
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = json.dumps({"bytes": size}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server() -> Iterator[int]:
    settings = Settings(http_header_timeout_s=HEAD_S, http_keep_alive_s=KEEP_ALIVE_S, http_body_timeout_s=BODY_S,
                        http_max_connections=4)
    app = RequestContextMiddleware(echo, max_body_bytes=1 << 20, body_timeout_s=settings.http_body_timeout_s)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, lifespan="off", **uvicorn_options(settings)))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.01)
    yield sock.getsockname()[1]
    srv.should_exit = True
    thread.join(10)
    sock.close()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def closed_by_server(s: socket.socket, within_s: float = 8.0) -> bool:
    """True once the server closed `s` (EOF), reading (and dropping) whatever it sent first."""
    s.settimeout(within_s)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_connection_that_sends_nothing_is_closed(server):
    with connect(server) as s:
        assert closed_by_server(s)


def test_a_trickled_request_head_is_closed(server):
    with connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\n")
        for _ in range(int(HEAD_S / 0.1) + 5):  # each byte once cancelled uvicorn's only timer
            try:
                s.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.1)
        assert closed_by_server(s)


def test_an_idle_keep_alive_connection_is_closed_after_a_response(server):
    with connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in s.recv(4096)
        assert closed_by_server(s)


def test_a_trickled_body_gets_408_and_the_connection_closes(server):
    with connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        s.settimeout(8)
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert b'"code": "request_timeout"' in head or b'"code":"request_timeout"' in head
        assert closed_by_server(s)


def test_a_whole_request_is_answered(server):
    with connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        s.settimeout(8)
        assert b'{"bytes": 5}' in s.recv(4096)


def test_connections_past_the_limit_are_closed_at_once(server):
    held = [connect(server) for _ in range(4)]
    try:
        time.sleep(0.1)
        with connect(server) as extra:
            assert closed_by_server(extra, within_s=HEAD_S / 2)  # before any head deadline could fire
    finally:
        for s in held:
            s.close()
