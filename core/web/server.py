"""How finserve's HTTP servers run uvicorn (the gateway of `finserve serve` and `finserve up`, and an engine
replica's `finserve engine`): a connection that never completes a request is closed, and open connections are
bounded.

uvicorn closes an idle keep-alive connection `timeout_keep_alive` seconds after a response, but a connection
that never completes a request head is held forever, with its file descriptor: a fresh one that sends nothing,
or one that trickles header bytes (each byte cancels the keep-alive timer). The protocol class `http_protocol`
builds arms a deadline (`http_header_timeout_s`) when a connection opens and after each response; a complete
request head cancels it, and when it fires with no request in flight the connection is closed. A body that
trickles in is the application's to time out: core/web/middleware.py answers 408 `request_timeout` when a body is
not complete `http_body_timeout_s` after its head. Past `http_max_connections` open connections a new one is
closed at once (uvicorn's own `limit_concurrency` answers a plain-text 503 instead of finserve's JSON error
shape, so it is not used); `http_backlog` bounds the kernel's queue of connections not accepted yet.
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from core.settings import Settings


def http_protocol(head_timeout_s: float, max_connections: int = 0, base: type[Any] = AutoHTTPProtocol) -> type[Any]:
    """uvicorn's HTTP protocol (`base`: httptools when installed, else h11) with the request-head deadline and
    the connection cap (0: none)."""

    class HeadTimeoutProtocol(base):  # type: ignore[misc]
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if max_connections and len(self.connections) > max_connections:
                transport.close()  # refused before any byte is read: no descriptor held for it
                return
            self._arm_head_deadline()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_flight():
                self._cancel_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # arms the keep-alive timer, may start a pipelined request
            if not self.transport.is_closing() and not self._in_flight():
                self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_deadline()
            super().connection_lost(exc)

        def _in_flight(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm_head_deadline(self) -> None:
            self._cancel_head_deadline()
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def _cancel_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if not self._in_flight() and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutProtocol


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn.run / uvicorn.Config keyword arguments of a finserve server, from its settings."""
    return {"http": http_protocol(settings.http_header_timeout_s, settings.http_max_connections),
            "timeout_keep_alive": settings.http_keep_alive_s, "backlog": settings.http_backlog,
            "log_config": None, "access_log": False, "timeout_graceful_shutdown": 30}
