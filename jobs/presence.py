"""Whether any worker consumes the queue: each worker keeps a key alive in Redis, the gateway counts them.

A job or batch submitted to `finserve serve` with no `finserve worker` running was accepted and then stayed
queued / in_progress for good, without a word (issue 49). Each worker process sets `finserve:worker:<name>`
with a time to live of TTL_BEATS renewals and renews it every PRESENCE_INTERVAL_S from a thread (deleted on a
warm shutdown; a killed worker's key runs out). The gateway reads the keys when it answers for an
unfinished job or batch and adds a `warning` (docs/JOBS.md, "No worker"): `no_worker` when Redis answers
and no key is alive, `queue_unavailable` when Redis does not answer. The submission is still accepted: a
job is durable in SQL and runs as soon as a worker starts, as OpenAI's Batch API accepts a batch and
reports its status; a 503 would make the openai SDK resubmit (without an Idempotency-Key, a second batch).

A key per worker, not Celery's `ping`: a ping waits out its whole timeout when no worker answers, on the
request's path; reading a few keys is one round trip. Redis's own expiry keeps clocks out of it.
"""
from __future__ import annotations

import socket
import threading
from typing import Literal

import redis
import structlog

log = structlog.get_logger("finserve.jobs")

PREFIX = "finserve:worker:"
PRESENCE_INTERVAL_S = 5.0
TTL_BEATS = 3  # a key lives this many renewals: two may be late before a live worker looks gone
READ_TIMEOUT_S = 1.0

QueueState = Literal["ok", "no_worker", "queue_unavailable"]
MESSAGES: dict[QueueState, str] = {
    "no_worker": "no worker is consuming the job queue: the items wait in SQL and Redis and run when a worker "
                 "starts (`finserve worker`, or `finserve up`, which runs one)",
    "queue_unavailable": "the job queue (Redis) does not answer: the items are saved in SQL and run once Redis "
                         "and a worker are back",
}


class WorkerPresence:
    """The worker side: keeps `PREFIX + name` alive in Redis while the process runs."""

    def __init__(self, broker_url: str, name: str | None = None, *, interval_s: float = PRESENCE_INTERVAL_S) -> None:
        self.key = PREFIX + (name or f"{socket.gethostname()}:{threading.get_native_id()}")
        self.interval_s = interval_s
        self._redis = redis.Redis.from_url(broker_url, socket_timeout=READ_TIMEOUT_S,
                                           socket_connect_timeout=READ_TIMEOUT_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="finserve-presence", daemon=True)

    def start(self) -> WorkerPresence:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + READ_TIMEOUT_S)
        try:
            self._redis.delete(self.key)  # a warm shutdown: gone now, not at the key's expiry
        except redis.RedisError:
            pass
        self._redis.close()

    def _run(self) -> None:
        ttl = max(1, round(TTL_BEATS * self.interval_s))
        while not self._stop.is_set():
            try:
                self._redis.set(self.key, "1", ex=ttl)
            except redis.RedisError as exc:  # Redis away: the consumer reconnects on its own, so do we
                log.debug("worker_presence_failed", error=f"{type(exc).__name__}: {exc}"[:200])
            self._stop.wait(self.interval_s)


def live_workers(broker_url: str) -> int | None:
    """How many workers' keys are alive; None when the broker is not Redis or does not answer."""
    if not broker_url.startswith(("redis://", "rediss://")):
        return None
    r = _connect(broker_url)
    try:
        return sum(1 for _ in r.scan_iter(match=PREFIX + "*", count=100))
    except redis.RedisError:
        return None
    finally:
        r.close()


def queue_state(broker_url: str) -> QueueState:
    """ok, no_worker or queue_unavailable (a broker other than Redis: ok, as nothing can be said)."""
    n = live_workers(broker_url)
    if n is None:
        return "queue_unavailable" if broker_url.startswith(("redis://", "rediss://")) else "ok"
    return "ok" if n > 0 else "no_worker"


def _connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=READ_TIMEOUT_S, socket_connect_timeout=READ_TIMEOUT_S)
