"""The consumer watchdog, and restarts in place: a worker whose Celery consumer stopped taking messages, or
whose Celery worker ended itself on an error, comes back as the same process.

Celery's Redis consumer can come back from a lost broker connection without consuming again: the worker
logs the reconnect (or an "Error on stopping Hub"), then sits idle while its queue fills, for good
(celery/celery#8030, #8082, #10205, still open in 5.5-5.7). Seen here once in a full test run: Redis
restarted mid-job, 75 messages queued, the worker alive, idle and silent for 180 s.

Nothing in Redis or SQL is wrong then, so the reconciler cannot help; the worker itself must notice. It is
stalled when, on every check for `stall_s` seconds in a row, it held no task at all (none running, reserved
or waiting on a retry countdown), it received none, and its queue in Redis was not empty: a live consumer
with a free slot takes a waiting message within moments (prefetch 1). Redis unreachable is not a stall (the
consumer's own reconnect is under way), and neither is a busy worker.

A stalled worker logs `consumer_stalled` and re-executes its own command line (`os.execv`): the same pid,
the same log file, a fresh Celery consumer. It holds no task when it does, so nothing in flight is cut off;
a message its consumer fetched but never handed on is an unacknowledged one, which the reconciler re-enqueues
(`worker_lost`) or Redis redelivers. A supervisor (`finserve up`, systemd, Kubernetes) sees no exit at all.

The other face of the same bug: Celery's consumer meets a half-closed connection while Redis is away
("Unrecoverable error: AttributeError('NoneType' object has no attribute 'hostname')", seen here in a full
test run) and the worker shuts itself down, exit code 1. `finserve worker` then restarts in place too
(`worker_restarted_in_place`), after 1, 2, 4 ... 30 s when it keeps failing (the count resets after 5 quiet
minutes; carried on the command line, `--crash-history`); a shutdown someone asked for (a signal, `celery control shutdown`) ends the process as asked.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress

import redis
import structlog

log = structlog.get_logger("finserve.jobs")


CRASH_FLAG = "--crash-history"  # "count:unix time of the last crash": carried across restarts in place
CRASH_QUIET_S = 300.0  # a worker up this long since its last crash starts counting again


def crashed_on_its_own(exitcode: int | None) -> bool:
    """True when the Celery worker ended with a failure nobody asked for (not a signal, not a control shutdown)."""
    from celery.worker import state

    requested = state.should_stop not in (None, False) or state.should_terminate not in (None, False)
    return bool(exitcode) and not requested


def crash_backoff_s(previous: str | None, now: float) -> tuple[float, str]:
    """Seconds to wait before restarting after a crash, and the CRASH_FLAG value to carry (pure)."""
    count, last = 0, 0.0
    with_count, _, at = (previous or "").partition(":")
    with suppress(ValueError):  # none yet, or unreadable: counted as the first
        count, last = int(with_count), float(at)
    if now - last > CRASH_QUIET_S:
        count = 0
    return min(30.0, 2.0 ** count), f"{count + 1}:{now:.0f}"


def with_option(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag value` (or `flag=value`) dropped and `flag value` appended."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return [*out, flag, value]


def restart_after_crash(exitcode: int, history: str | None) -> None:
    """Log, wait the backoff, and restart in place (`history`: this process's CRASH_FLAG value, if any)."""
    wait_s, carried = crash_backoff_s(history, time.time())
    log.error("worker_restarted_in_place", exit_code=exitcode, after_s=wait_s, crashes=int(carried.split(":")[0]),
              reason="the Celery worker ended itself on an error (see its 'Unrecoverable error' line)")
    time.sleep(wait_s)
    restart_in_place(with_option(list(sys.orig_argv), CRASH_FLAG, carried))


class StallDetector:
    """Decides from successive observations whether the consumer has stalled (pure; the clock is passed in)."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._since: float | None = None  # when the current idle-with-work-waiting stretch began
        self._received: int | None = None  # the counter at the last observation (None: no observation yet)

    def observe(self, now: float, *, held: int, queued: int | None, received: int) -> bool:
        """`held`: tasks this worker holds; `queued`: messages waiting in its queue (None: Redis unreachable);
        `received`: tasks received so far (a counter). True once the stall has lasted `stall_s`."""
        came_in = self._received is not None and received != self._received
        self._received = received
        if held or not queued or came_in:
            self._since = None
            return False
        if self._since is None:
            self._since = now
        return now - self._since >= self.stall_s

    def idle_s(self, now: float) -> float:
        """How long the current stretch has lasted at `now` (0: none under way)."""
        return 0.0 if self._since is None else now - self._since


def restart_in_place(argv: list[str] | None = None) -> None:
    """Replace this process by a fresh run of its own command line, or `argv` (same pid, same stdout/stderr)."""
    logging.shutdown()  # flush every handler: the log line saying why must reach the file
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv or sys.orig_argv)


class ConsumerWatchdog:
    """Checks every `poll_s` whether the consumer has stalled (StallDetector); on a stall, logs and `restart`s."""

    def __init__(self, redis_url: str, queue: str, *, stall_s: float, held: Callable[[], int],
                 received: Callable[[], int], restart: Callable[[], None] = restart_in_place,
                 poll_s: float | None = None) -> None:
        self._redis = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        self._queue, self._held, self._received, self._restart = queue, held, received, restart
        self.detector = StallDetector(stall_s)
        self.poll_s = poll_s if poll_s is not None else max(0.5, min(5.0, stall_s / 6))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="finserve-consumer-watchdog", daemon=True)

    def start(self) -> ConsumerWatchdog:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._redis.close()

    def queued(self) -> int | None:
        try:
            return int(self._redis.llen(self._queue))
        except redis.RedisError:
            return None

    def check(self) -> bool:
        """One observation; True (after logging) when the consumer has stalled."""
        received, queued, now = self._received(), self.queued(), time.monotonic()
        if not self.detector.observe(now, held=self._held(), queued=queued, received=received):
            return False
        log.error("consumer_stalled", queued=queued, idle_s=round(self.detector.idle_s(now), 1),
                  received=received, action="restart_in_place",
                  reason="idle with messages waiting in its queue: the Celery consumer stopped taking them "
                         "(a known Celery bug after a lost Redis connection)")
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                stalled = self.check()
            except Exception as exc:  # a watchdog that dies would leave the worker unwatched: log, go on
                log.warning("consumer_watchdog_failed", error=f"{type(exc).__name__}: {exc}"[:300])
                continue
            if stalled:
                self._restart()
                return
