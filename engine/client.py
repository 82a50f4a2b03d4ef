"""EngineClient: runs the engine loop in a background thread and serves asyncio callers.

All engine mutation happens on the loop thread. Callers talk to it through an inbox
(add / abort), so admission answers come from the same thread that schedules.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import AsyncIterator

import structlog

from engine.engine import LLMEngine
from engine.outputs import AdmissionError, EngineStats, RequestOutput
from engine.request import EngineRequest

log = structlog.get_logger(__name__)


@dataclass
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


class EngineClient:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._subs: dict[str, _Subscriber] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: EngineStats | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> "EngineClient":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="finserve-engine", daemon=True)
            self._thread.start()
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def policy(self):
        return self.engine.config.policy

    # ---- caller side ----------------------------------------------------------------------
    async def generate(self, req: EngineRequest) -> AsyncIterator[RequestOutput]:
        """Yields outputs until the finished one. Raises AdmissionError before yielding anything.

        Leaving the iteration early (client disconnect, cancellation) aborts the request.
        """
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        admitted: Future = Future()
        self._inbox.put(("add", req, _Subscriber(loop, q), admitted))
        self._wake.set()
        finished = False
        try:
            await asyncio.wrap_future(admitted)  # re-raises AdmissionError
            while not finished:
                out: RequestOutput = await q.get()
                finished = out.finished
                yield out
        except AdmissionError:
            finished = True  # never entered the engine: nothing to abort
            raise
        finally:
            if not finished:  # disconnect or cancellation, possibly while admission was pending
                self.abort(req.request_id)

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id, None, None))
        self._wake.set()

    def stats(self) -> EngineStats:
        """Snapshot taken by the loop thread after its last step (never blocks on the engine)."""
        return self._stats if self._stats is not None else self.engine.stats()

    # ---- loop thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain_inbox()
            if not self.engine.has_unfinished():
                self._stats = self.engine.stats()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            outputs = self.engine.step()
            self._stats = self.engine.stats()
            self._deliver(outputs)
        self._abort_all()

    def _drain_inbox(self) -> None:
        while True:
            try:
                op, arg, sub, fut = self._inbox.get_nowait()
            except queue.Empty:
                return
            if op == "abort":
                self.engine.abort_request(arg)
                continue
            if not fut.set_running_or_notify_cancel():  # the caller gave up before admission
                continue
            try:
                self.engine.add_request(arg)
            except Exception as e:  # AdmissionError or a bug: the caller gets it, the loop goes on
                fut.set_exception(e)
                continue
            self._subs[arg.request_id] = sub
            fut.set_result(None)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for out in outputs:
            sub = self._subs.get(out.request_id)
            if sub is None:
                continue
            if out.finished:
                del self._subs[out.request_id]
            by_loop.setdefault(sub.loop, []).append((sub.queue, out))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass

    def _abort_all(self) -> None:
        self._drain_inbox()
        for rid in list(self._subs):
            self.engine.abort_request(rid)
        self._deliver(self.engine.step() if self.engine.has_unfinished() else [])


def _put_all(items) -> None:
    for q, out in items:
        q.put_nowait(out)
