"""Starting the stack's processes, in one place: `finserve up`, the bulk benchmark and the job fault tests.

- `worker_env(settings)`: the FINSERVE_* environment a child process (a Celery worker, the CLI) needs to
  see the same configuration as this process; configuration travels to children this way only, this
  process's own environment is never rewritten.
- `start_worker` / `stop_worker`: a Celery worker in its own process group (a terminal Ctrl-C reaches only
  the parent), stopped with SIGTERM (Celery's warm shutdown), then SIGKILL after a timeout.
- `start_engines` / `wait_engines_ready`: N engine servers (`finserve engine`) on 127.0.0.1, the machine's
  threads split between them, for `finserve up --replicas N`, the replica benchmark and the failover tests.
- `GatewayThread`: the app behind a real uvicorn server on 127.0.0.1 in a thread, for tests and benchmarks
  that inject their own engine.
- `Supervisor`: for `finserve up`, restarts a child that died (the worker, Redis) with backoff, one log line
  per restart.
Everything binds to 127.0.0.1.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import structlog
import uvicorn

from core.processes import stop_process
from core.settings import Settings
from engine.client import EngineClient
from finserve.app import create_app
from jobs.redis_server import free_port

FINSERVE = str(Path(sys.executable).parent / "finserve")
WORKER_STOP_TIMEOUT_S = 30.0
QUEUE = "finserve.extraction"  # = jobs.celery_app.QUEUE (not imported: importing it builds a Celery app)


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This process's environment plus every field of `settings` (not None) as FINSERVE_* variables."""
    env = dict(os.environ)
    for name, value in settings.model_dump(exclude_none=True).items():
        env[f"FINSERVE_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    env.update(extra)
    return env


def worker_argv(concurrency: int, loglevel: str = "INFO", name: str | None = None) -> list[str]:
    # Threads: an item is one HTTP call, so threads give `concurrency` items in flight cheaply.
    argv = ["worker", "--pool", "threads", "--concurrency", str(concurrency), "--loglevel", loglevel,
            "--without-gossip", "--without-mingle", "--queues", QUEUE]
    return argv + (["--hostname", name] if name else [])


def start_worker(settings: Settings, *, concurrency: int, name: str | None = None, loglevel: str | None = None,
                 log: IO[bytes] | None = None, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`finserve worker`, configured like `settings` (broker, gateway URL, key, database, home; the log level
    too unless `loglevel` is given)."""
    argv = [FINSERVE, "worker", "--concurrency", str(concurrency), "--loglevel", loglevel or settings.log_level.upper()]
    return subprocess.Popen(argv + (["--name", name] if name else []),
                            env=worker_env(settings, **(extra_env or {})), stdout=log,
                            stderr=subprocess.STDOUT if log is not None else None, start_new_session=True)


def stop_worker(proc: subprocess.Popen[bytes], timeout_s: float = WORKER_STOP_TIMEOUT_S) -> None:
    # Warm shutdown: items in flight finish or go back to the queue; after a kill, unacknowledged
    # items are redelivered and SQL still has them pending/running.
    stop_process(proc, timeout_s)


@dataclass
class EngineProcess:
    url: str
    port: int
    threads: int
    proc: subprocess.Popen[bytes]


def split_threads(total: int, replicas: int) -> list[int]:
    """Threads per replica: `total` shared as evenly as possible, at least one each."""
    base, extra = divmod(max(total, replicas), replicas)
    return [base + (1 if i < extra else 0) for i in range(replicas)]


def start_engine(settings: Settings, *, port: int, threads: int, log: IO[bytes] | None = None) -> EngineProcess:
    """One `finserve engine` process on 127.0.0.1:port (its own process group), configured like `settings`."""
    argv = [FINSERVE, "engine", "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]
    proc = subprocess.Popen(argv, env=worker_env(settings, OMP_NUM_THREADS=str(threads)), stdout=log,
                            stderr=subprocess.STDOUT if log is not None else None, start_new_session=True)
    return EngineProcess(f"http://127.0.0.1:{port}", port, threads, proc)


def start_engines(settings: Settings, replicas: int, *, total_threads: int | None = None,
                  log: IO[bytes] | None = None) -> list[EngineProcess]:
    total = total_threads or settings.threads or os.cpu_count() or 1
    return [start_engine(settings, port=free_port(), threads=t, log=log) for t in split_threads(total, replicas)]


def wait_engines_ready(engines: list[EngineProcess], timeout_s: float = 180.0) -> None:
    """Until every engine's /readyz answers 200; raises if one exits or the time runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    pending = list(engines)
    while pending:
        for e in list(pending):
            if e.proc.poll() is not None:
                raise RuntimeError(f"engine {e.url} exited with {e.proc.returncode}")
            try:
                if httpx.get(f"{e.url}/readyz", timeout=1.0).status_code == 200:
                    pending.remove(e)
                elif (live := httpx.get(f"{e.url}/healthz", timeout=1.0)).status_code != 200:
                    raise RuntimeError(f"engine {e.url} failed to start: {live.text}")
            except httpx.TransportError:
                pass
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"engines not ready after {timeout_s:.0f} s: {[e.url for e in pending]}")
        time.sleep(0.2)


def stop_engine(engine: EngineProcess, timeout_s: float = 15.0) -> None:
    stop_process(engine.proc, timeout_s)


class GatewayThread:
    """The finserve app behind a real uvicorn server on 127.0.0.1 (workers reach it over HTTP)."""

    def __init__(self, settings: Settings, engine_client: EngineClient | None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings, engine_client=engine_client)
        self._server = uvicorn.Server(uvicorn.Config(self.app,
                                                     host="127.0.0.1", port=self.port, log_config=None,
                                                     access_log=False, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)

    def start(self, timeout_s: float = 15.0) -> "GatewayThread":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the gateway (uvicorn) did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(15)


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
        self._lock = threading.Lock()  # a restart finishes before stop() returns
        self._thread = threading.Thread(target=self._run, name="finserve-supervisor", daemon=True)
        self._log = structlog.get_logger("finserve.up")

    def watch(self, child: Child) -> Child:
        child.backoff_s = self.min_backoff_s
        self.children.append(child)
        return child

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            pass
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
