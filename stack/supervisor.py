"""`Supervisor`: for `finserve up`, restarts a child that died (the worker, Redis) with backoff, one log line
per restart."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog


@dataclass
class Child:
    """One supervised process: how to tell it is gone and how to start it again."""

    name: str  # "worker", "redis"
    pid: Callable[[], int | None]
    exit_code: Callable[[], int | None]  # None while it runs
    restart: Callable[[], dict[str, object] | None]  # starts a new one (raises if it cannot); extra log fields
    started: float = field(default_factory=time.monotonic)
    backoff_s: float = 0.0
    restarts: int = 0
    died_at: float | None = None
    last_exit: int | None = None
    last_pid: int | None = None


class Supervisor:
    """Restarts dead children of `finserve up` with backoff, saying so in one log line per restart.

    A child that dies is started again after `min_backoff_s`, doubling up to `max_backoff_s` while it keeps
    dying; one that stayed up `stable_s` starts again from the minimum. A restart that fails (the port was
    taken meanwhile, say) is logged and tried again after the next backoff. `stop()` before stopping the
    children on shutdown, or they would be brought back.
    """

    def __init__(self, *, min_backoff_s: float = 1.0, max_backoff_s: float = 30.0, stable_s: float = 60.0,
                 poll_s: float = 0.5) -> None:
        self.min_backoff_s, self.max_backoff_s, self.stable_s, self.poll_s = (
            min_backoff_s, max_backoff_s, stable_s, poll_s)
        self.children: list[Child] = []
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()  # a restart finishes before stop() returns
        self._thread = threading.Thread(target=self._run, name="finserve-supervisor", daemon=True)
        self._log = structlog.get_logger("finserve.up")

    def watch(self, child: Child) -> Child:
        child.backoff_s = self.min_backoff_s
        self.children.append(child)
        return child

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No restart after this returns (one under way finishes first). The thread itself stays, idle, until
        `close()` or the process's end: a child it restarted gets SIGTERM when the thread that started it ends
        (PR_SET_PDEATHSIG, core/parent_death.py), so it must outlive the child's orderly stop."""
        self._stop.set()
        with self._lock:
            pass

    def close(self) -> None:
        """Ends the thread (after the children are stopped)."""
        self._stop.set()
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def check(self, now: float | None = None) -> None:
        """One look at every child (the thread calls it every `poll_s`)."""
        with self._lock:
            for child in self.children:
                if self._stop.is_set():
                    return
                self._check(child, time.monotonic() if now is None else now)

    def _check(self, child: Child, now: float) -> None:
        code = child.exit_code()
        if code is None:
            if now - child.started >= self.stable_s:
                child.backoff_s = self.min_backoff_s
            return
        if child.died_at is None:  # first seen dead: wait its backoff before starting it again
            child.died_at, child.last_exit, child.last_pid = now, code, child.pid()
            return
        if now - child.died_at < child.backoff_s:
            return
        waited = child.backoff_s
        try:
            extra = child.restart() or {}
        except Exception as exc:
            child.died_at = now
            child.backoff_s = min(self.max_backoff_s, child.backoff_s * 2)
            self._log.error("process_restart_failed", process=child.name, error=f"{type(exc).__name__}: {exc}"[:300],
                            retry_in_s=child.backoff_s)
            return
        child.restarts += 1
        child.started, child.died_at = now, None
        child.backoff_s = min(self.max_backoff_s, child.backoff_s * 2)
        self._log.warning("process_restarted", process=child.name, old_pid=child.last_pid, exit_code=child.last_exit,
                          new_pid=child.pid(), after_s=round(waited, 1), restarts=child.restarts, **extra)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception as exc:  # never let supervision itself die silently
                self._log.error("supervisor_error", error=f"{type(exc).__name__}: {exc}"[:300])
        self._closed.wait()  # the children it restarted are bound to this thread (stop())
