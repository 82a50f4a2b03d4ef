"""Starting the stack's processes, in one place: `finserve up`, the benchmarks and the job fault tests.

- `worker_env(settings)`: the FINSERVE_* environment a child process (a Celery worker, the CLI) needs to
  see the same configuration as this process; configuration travels to children this way only, this
  process's own environment is never rewritten.
- `start_worker` / `stop_worker`: a Celery worker in its own process group (a terminal Ctrl-C reaches only
  the parent), stopped with SIGTERM (Celery's warm shutdown), then SIGKILL after a timeout. Workers and
  engine servers get SIGTERM when the process that started them dies, however it dies (core/parent_death.py):
  a killed `finserve up` leaves nothing behind.
- `start_engines` / `wait_engines_ready`: N engine servers (`finserve engine`) on 127.0.0.1, the machine's
  threads split between them, for `finserve up --replicas N`, the replica benchmark and the failover tests.
- `GatewayThread`: the app behind a real uvicorn server on 127.0.0.1 in a thread, for tests and benchmarks
  that inject their own engine.
Everything binds to 127.0.0.1.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import uvicorn

from core.parent_death import with_parent_death
from core.processes import stop_process
from core.settings import Settings
from engine.client import EngineClient
from jobs.celery_app import QUEUE
from jobs.redis_server import free_port
from stack.app import create_app

FINSERVE = str(Path(sys.executable).parent / "finserve")
WORKER_STOP_TIMEOUT_S = 30.0


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
    return subprocess.Popen(with_parent_death(argv + (["--name", name] if name else [])),
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
    proc = subprocess.Popen(with_parent_death(argv), env=worker_env(settings, OMP_NUM_THREADS=str(threads)), stdout=log,
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

    def start(self, timeout_s: float = 15.0) -> GatewayThread:
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
