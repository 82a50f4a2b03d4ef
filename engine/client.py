"""LocalEngineClient: runs the engine loop in a supervised background thread and serves asyncio callers.

The embedded front of the EngineClient protocol (engine/protocol.py).

All engine mutation happens on the loop thread. Callers talk to it through an inbox
(add / abort / evict a prefix), so admission answers come from the same thread that schedules.

Outputs are handed to the event loop while the next step computes: a step's outputs are held until the next
step has built its tensors and is about to enter the model (`LLMEngine.step(before_compute=...)`), or until the
loop goes idle. Waking the event loop at the end of a step made it take the GIL from the engine thread at the
next step's first GIL-releasing call (numpy, torch, ctypes) and run its whole per-token burst (SSE, middleware)
while the engine waited; handed over just before the model runs (native code, GIL released), the two overlap.
A token reaches its caller one step-preparation later (well under a millisecond at batch 1).

Supervision: the engine already fails single requests and single steps without stopping. If the
loop itself raises, every request in flight gets a finished "error" output (nobody waits
forever), and the loop starts again after a backoff (base x 2^k, capped). More than
`max_restarts` crashes within `restart_window_s` leave it dead: `health().alive` turns False
(liveness fails), `running` turns False (the gateway stops routing to it), and `generate`
refuses with AdmissionError "engine_unavailable".
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

from engine import protocol
from engine.engine import LLMEngine
from engine.heap import freeze_startup_heap
from engine.outputs import AdmissionError, EngineHealth, EngineStats, PrefixEvicted, PrefixEviction, RequestOutput
from engine.protocol import Placement
from engine.request import EngineRequest, RequestMetrics
from engine.tokenizer import Tokenizer
from policies import Policy

log = structlog.get_logger(__name__)

MAX_RESTARTS = 5  # crashes tolerated within RESTART_WINDOW_S; a loop that keeps crashing is dead
RESTART_WINDOW_S = 60.0
RESTART_BACKOFF_S = 0.1  # first restart delay; doubles per crash in the window, capped below
MAX_BACKOFF_S = 5.0


@dataclass
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput]
    request: EngineRequest


@dataclass
class _Evict:
    prefix: PrefixEviction
    done: Future[PrefixEvicted]


_Op = tuple[Literal["add"], EngineRequest, _Subscriber, "Future[None]"] | tuple[Literal["abort"], str, None, None] \
    | _Evict


class LocalEngineClient:
    def __init__(
        self,
        engine: LLMEngine,
        *,
        max_restarts: int = MAX_RESTARTS,
        restart_window_s: float = RESTART_WINDOW_S,
        restart_backoff_s: float = RESTART_BACKOFF_S,
    ):
        self.engine = engine
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restart_backoff_s = restart_backoff_s
        self._inbox: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._inbox_lock = threading.Lock()  # `_accepting` and puts: no add lands after the loop is gone
        self._accepting = True
        self._subs: dict[str, _Subscriber] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: EngineStats | None = None
        self._held: list[RequestOutput] = []  # the last step's outputs, handed over when the next one computes
        self._hand_over_error: BaseException | None = None
        self._crashes: collections.deque[float] = collections.deque()  # monotonic times, within the window
        self._restarts = 0
        self._restarting = False
        self._dead = False
        self._last_error: str | None = None
        self._failed_here = 0  # requests failed by the client when the engine could not fail them

    # ---- lifecycle ------------------------------------------------------------------------
    @classmethod
    def launch(cls, factory: Callable[[], LLMEngine], **kwargs: Any) -> LocalEngineClient:
        """Build the engine with `factory` ON the loop thread, then run the loop there.

        OpenMP (torch's intra-op pool; the native kernels have their own, engine/model/kernels/pool.c) keeps a
        team of threads per calling thread: an engine loaded on one thread and stepped on another leaves two teams
        competing for the cores, and a parallel region from the second thread ran slower than from the first.
        Loading and stepping on one thread keeps one team. Raises what the factory raised.
        """
        ready: Future[LocalEngineClient] = Future()

        def run() -> None:
            try:
                client = cls(factory(), **kwargs)
            except BaseException as exc:  # handed to the caller, who decides
                ready.set_exception(exc)
                return
            client._thread = threading.current_thread()
            freeze_startup_heap()  # engine/heap.py
            ready.set_result(client)
            client._supervise()

        threading.Thread(target=run, name="finserve-engine", daemon=True).start()
        return ready.result()

    def start(self) -> LocalEngineClient:
        if self._thread is None:
            self._stop.clear()
            with self._inbox_lock:
                self._accepting = True
            self._thread = threading.Thread(target=self._supervise, name="finserve-engine", daemon=True)
            self._thread.start()
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    async def aclose(self) -> None:
        """shutdown() in a worker thread: joining the loop thread never stalls the caller's event loop."""
        await asyncio.to_thread(self.shutdown)

    @property
    def running(self) -> bool:
        """The loop thread is up (possibly waiting to restart): requests sent now will be served."""
        return self._thread is not None and self._thread.is_alive() and not self._dead

    def health(self) -> EngineHealth:
        alive = self.running
        return EngineHealth(
            alive=alive,
            ready=alive and not self._restarting and not self._stop.is_set(),
            restarts=self._restarts,
            max_restarts=self.max_restarts,
            last_error=self._last_error,
            in_flight=len(self._subs),
        )

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def policy(self) -> Policy:
        return self.engine.config.policy

    # ---- caller side ----------------------------------------------------------------------
    async def generate(self, req: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        """Yields outputs until the finished one. Raises AdmissionError before yielding anything.

        Leaving the iteration early (client disconnect, cancellation) aborts the request.
        """
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[RequestOutput] = asyncio.Queue()
        admitted: Future[None] = Future()
        with self._inbox_lock:
            if not self._accepting:
                raise _unavailable(self._last_error)
            self._inbox.put(("add", req, _Subscriber(loop, q, req), admitted))
        self._wake.set()
        finished = False
        try:
            await asyncio.wrap_future(admitted)  # re-raises AdmissionError
            while not finished:
                out = await q.get()
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

    async def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        """Done by the loop thread between two steps; nothing when the loop is gone (nothing is cached)."""
        op = _Evict(prefix, Future())
        with self._inbox_lock:
            if not self._accepting:
                return PrefixEvicted()
            self._inbox.put(op)
        self._wake.set()
        return await asyncio.wrap_future(op.done)

    def pop_placement(self, request_id: str) -> Placement | None:
        """One engine: nothing is placed."""
        return None

    def stats(self) -> EngineStats:
        """Snapshot taken by the loop thread after its last step (never blocks on the engine)."""
        snap = self._stats if self._stats is not None else self.engine.stats()
        failed = snap.failed_requests + self._failed_here
        return dataclasses.replace(snap, loop_restarts=self._restarts, failed_requests=failed)

    # ---- loop thread ----------------------------------------------------------------------
    def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                self._loop()
            except Exception as e:
                if not self._recover(e):
                    break
        self._close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._drain_inbox()
            if not self.engine.has_unfinished():
                self._hand_over()
                self._stats = self.engine.stats()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            outputs = self.engine.step(before_compute=self._hand_over_in_step)
            self._hand_over()  # the step computed nothing (or failed before it did)
            self._held = outputs
            if self._hand_over_error is not None:
                error, self._hand_over_error = self._hand_over_error, None
                raise error
            self._stats = self.engine.stats()

    def _hand_over(self) -> None:
        """Delivers the held outputs of the last step."""
        held, self._held = self._held, []
        if held:
            self._deliver(held)

    def _hand_over_in_step(self) -> None:
        """_hand_over from inside a step: an error is kept for the loop (it is the loop's, not the step's requests')."""
        try:
            self._hand_over()
        except Exception as e:
            self._hand_over_error = e

    def _recover(self, exc: Exception) -> bool:
        """After a loop crash: fail everything in flight; True if the loop may start again."""
        self._last_error = f"{type(exc).__name__}: {exc}"
        log.error("engine_loop_crashed", error=self._last_error, in_flight=len(self._subs), exc_info=exc)
        self._fail_in_flight(f"engine loop crashed: {self._last_error}")
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > self.restart_window_s:
            self._crashes.popleft()
        if len(self._crashes) > self.max_restarts:
            log.error("engine_loop_dead", crashes=len(self._crashes), window_s=self.restart_window_s)
            self._dead = True
            return False
        delay = min(MAX_BACKOFF_S, self.restart_backoff_s * 2 ** (len(self._crashes) - 1))
        self._restarting = True
        stopping = self._stop.wait(delay)
        self._restarting = False
        if stopping:
            return False
        self._restarts += 1
        log.warning("engine_loop_restarted", restarts=self._restarts, after_s=delay)
        return True

    def _fail_in_flight(self, error: str) -> None:
        try:
            self._hand_over()  # what the last step produced reaches its callers before anything fails
        except Exception:
            log.exception("engine_hand_over_failed")
            self._held = []
        try:
            self._deliver(self.engine.fail_all(error))
        except Exception:
            log.exception("engine_fail_all_failed")
            self.engine.reset()
        for rid, sub in list(self._subs.items()):  # whatever the engine could not answer for
            m = RequestMetrics.of(sub.request)
            self._deliver([RequestOutput(rid, [], "", True, "error", m, error)])
            self._failed_here += 1

    def _drain_inbox(self) -> None:
        while True:
            try:
                op = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(op, _Evict):
                self._evict(op)
                continue
            if op[0] == "abort":
                self.engine.abort_request(op[1])
                continue
            _, req, sub, fut = op
            if not fut.set_running_or_notify_cancel():  # the caller gave up before admission
                continue
            try:
                self.engine.add_request(req)
            except Exception as e:  # AdmissionError or a bug: the caller gets it, the loop goes on
                fut.set_exception(e)
                continue
            self._subs[req.request_id] = sub
            fut.set_result(None)

    def _evict(self, op: _Evict) -> None:
        """Evicts even when the caller stopped waiting (its document is deleted all the same)."""
        waiting = op.done.set_running_or_notify_cancel()
        try:
            result = self.engine.evict_prefix(op.prefix)
        except Exception as e:  # a bug: the caller gets it, the loop goes on
            log.exception("engine_evict_prefix_failed")
            if waiting:
                op.done.set_exception(e)
            return
        if waiting:
            op.done.set_result(result)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[RequestOutput], RequestOutput]]] = {}
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

    def _close(self) -> None:
        """The loop is gone (shutdown, or dead): answer every caller, refuse new ones."""
        with self._inbox_lock:
            self._accepting = False
        reason = "the engine is shutting down" if not self._dead else f"engine loop dead: {self._last_error}"
        while True:
            try:
                op = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(op, _Evict):
                if op.done.set_running_or_notify_cancel():
                    op.done.set_result(PrefixEvicted())  # the engine is gone, and with it what it cached
            elif op[0] == "add" and op[3].set_running_or_notify_cancel():
                op[3].set_exception(_unavailable(reason))
        try:
            self._hand_over()
            for rid in list(self._subs):
                self.engine.abort_request(rid)
            self._deliver(self.engine.step() if self.engine.has_unfinished() else [])
        except Exception:
            log.exception("engine_shutdown_failed")
        for rid, sub in list(self._subs.items()):
            self._deliver([RequestOutput(rid, [], "", True, "abort", RequestMetrics.of(sub.request), reason)])


# The concrete class under its former name, for callers outside the gateway and engine (finserve/, bench/,
# tests/jobs) that build it; the interface callers hold is engine.protocol.EngineClient.
EngineClient = LocalEngineClient


def _unavailable(reason: str | None) -> AdmissionError:
    message = f"the engine is not serving ({reason})" if reason else "the engine is not serving"
    return AdmissionError("engine_unavailable", message, retryable=True, retry_after_s=5.0)


def _put_all(items: list[tuple[asyncio.Queue[RequestOutput], RequestOutput]]) -> None:
    for q, out in items:
        q.put_nowait(out)


if TYPE_CHECKING:  # mypy checks that the class implements the protocol
    _implements: type[protocol.EngineClient] = LocalEngineClient
