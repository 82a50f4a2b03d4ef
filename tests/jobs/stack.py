"""A real bulk-extraction stack for the fault tests: redis-server, the gateway behind uvicorn
(in a thread, with the engine on a tiny random model), and Celery workers as separate processes.

Everything binds to 127.0.0.1. Every process started here is stopped by `close()` (the fixture
calls it), workers with SIGTERM and then SIGKILL, so no test leaves anything running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from engine.client import EngineClient
from gateway.app import create_app
from gateway.settings import Settings
from jobs.celery_app import use_broker
from jobs.redis_server import RedisServer, free_port

FINSERVE = str(Path(sys.executable).parent / "finserve")
# Short leases so that a lost worker's items come back within seconds, not minutes.
FAST_JOBS_ENV = {
    "FINSERVE_JOBS_LEASE_S": "10",
    "FINSERVE_JOBS_REQUEST_TIMEOUT_S": "8",
    "FINSERVE_JOBS_RESTORE_INTERVAL_S": "1",
    "FINSERVE_JOBS_BACKOFF_BASE_S": "0.2",
    "FINSERVE_JOBS_BACKOFF_MAX_S": "2",
}


class GatewayThread:
    """The gateway app behind a real uvicorn server on 127.0.0.1 (workers reach it over HTTP)."""

    def __init__(self, settings: Settings, engine_client: EngineClient) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(create_app(settings, engine_client=engine_client),
                                                     host="127.0.0.1", port=self.port, log_config=None,
                                                     access_log=False, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)

    def start(self) -> "GatewayThread":
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(15)


@dataclass
class Stack:
    home: Path
    db_url: str
    api_key: str
    redis: RedisServer
    gateway: GatewayThread
    workers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment of every process of this stack (workers, `finserve jobs resume`)."""
        return {**os.environ, **FAST_JOBS_ENV, "FINSERVE_HOME": str(self.home), "FINSERVE_DATABASE_URL": self.db_url,
                "FINSERVE_BROKER_URL": self.redis.url, "FINSERVE_GATEWAY_URL": self.gateway.url,
                "FINSERVE_API_KEY": self.api_key, "FINSERVE_LOG_JSON": "true"}

    def start_worker(self, name: str, concurrency: int = 4) -> subprocess.Popen:
        log = (self.home / f"worker-{name}.log").open("ab")
        proc = subprocess.Popen([FINSERVE, "worker", "--concurrency", str(concurrency), "--name", f"{name}@%h",
                                 "--loglevel", "WARNING"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.workers.append(proc)
        return proc

    def cli(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([FINSERVE, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def restart_redis(self) -> None:
        """Stop Redis and start an empty one on the same port: everything queued is gone."""
        self.redis.stop()
        self.redis = RedisServer(port=self.redis.port, workdir=self.redis.workdir).start()

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.gateway.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.api_key}"})

    def worker_logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.home.glob("worker-*.log")))

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.gateway.stop()
        self.redis.stop()


def start_stack(home: Path, db_url: str, api_key: str, engine_client: EngineClient) -> Stack:
    redis = RedisServer(workdir=home / "redis").start()
    use_broker(redis.url)  # the gateway (this process) enqueues to the test's Redis
    try:
        gateway = GatewayThread(Settings(home=home, database_url=db_url, log_json=True), engine_client).start()
    except Exception:
        redis.stop()
        raise
    return Stack(home, db_url, api_key, redis, gateway)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
