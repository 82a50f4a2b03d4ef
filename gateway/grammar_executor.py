"""Grammar work on its own threads, a few at a time per tenant: one tenant's compiles never hold another's request.

Compiling and probing a client's output constraint (in a grammar child, engine/grammar_pool.py, while a
thread here waits for it), building a chat request's tool and output schemas, and checking them against
the grammar limits can take seconds for a large constraint. In asyncio's default thread pool, eight such
requests from one tenant took every thread, and another tenant's `/v1/risk/assess` waited behind them.

`GrammarExecutor.run(tenant, fn, *args)` runs `fn` on this executor's `workers` threads, with at most
`per_tenant` of them running one tenant's work at a time. A tenant over its share waits its turn (first
come, first served within the tenant) while other tenants' work starts on the free threads; a tenant
that already has `queue` calls waiting is refused at once: 429 `grammar_queue_full` with Retry-After.
The waiting is on the event loop (no thread is held by a waiting call); everything here runs on one loop.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from core.web.errors import APIError

P = ParamSpec("P")
T = TypeVar("T")
RETRY_AFTER_S = 1.0


@dataclass
class _Tenant:
    running: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


class GrammarExecutor:
    def __init__(self, *, workers: int, per_tenant: int, queue: int) -> None:
        self.per_tenant, self.queue = per_tenant, queue
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="finserve-grammar")
        self._tenants: dict[str, _Tenant] = {}

    async def run(self, tenant: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on a grammar thread once `tenant` has a free share; its result or exception."""
        await self._enter(tenant)
        try:
            call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)  # the request's log fields
            return await asyncio.get_running_loop().run_in_executor(self._threads, call)
        finally:
            self._leave(tenant)

    def waiting(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return len(t.waiters) if t is not None else 0

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _enter(self, tenant: str) -> None:
        t = self._tenants.setdefault(tenant, _Tenant())
        if t.running < self.per_tenant and not t.waiters:
            t.running += 1
            return
        if len(t.waiters) >= self.queue:
            raise APIError("grammar_queue_full", f"this tenant already has {t.running} output constraints compiling "
                           f"and {len(t.waiters)} waiting (FINSERVE_GRAMMAR_TENANT_QUEUE); retry later",
                           retry_after_s=RETRY_AFTER_S)
        turn = asyncio.get_running_loop().create_future()
        t.waiters.append(turn)
        try:
            await turn  # _leave hands this call its running share (t.running unchanged)
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._leave(tenant)  # handed a share it will not use: pass it on
            elif turn in t.waiters:
                t.waiters.remove(turn)
            raise

    def _leave(self, tenant: str) -> None:
        t = self._tenants[tenant]
        while t.waiters:
            turn = t.waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        t.running -= 1
        if t.running == 0:
            del self._tenants[tenant]
