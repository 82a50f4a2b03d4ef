"""A real bulk-extraction stack for the fault tests: redis-server, the gateway behind uvicorn
(in a thread, with the engine on a tiny random model), and Celery workers as separate processes.

Everything binds to 127.0.0.1. Every process started here is stopped by `close()` (the fixture
calls it), workers with SIGTERM and then SIGKILL, so no test leaves anything running.
"""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from core.settings import Settings
from engine.client import LocalEngineClient
from jobs.runtime.celery_app import QUEUE, use_broker
from jobs.runtime.redis_server import RedisServer
from stack.processes import FINSERVE, GatewayThread, start_worker, worker_env

# Short leases so that a lost worker's items come back within seconds, not minutes.
FAST_JOBS_ENV = {
    "FINSERVE_JOBS_LEASE_S": "10",
    "FINSERVE_JOBS_REQUEST_TIMEOUT_S": "8",
    "FINSERVE_JOBS_RESTORE_INTERVAL_S": "1",
    "FINSERVE_JOBS_RECONCILE_INTERVAL_S": "1",
    "FINSERVE_JOBS_BACKOFF_BASE_S": "0.2",
    "FINSERVE_JOBS_BACKOFF_MAX_S": "2",
}


@dataclass
class Stack:
    home: Path
    db_url: str
    api_key: str  # the client's key (tenant "acme"): submits jobs, reads them
    worker_key: str  # the workers' key: a worker key of another tenant, acting as each item's owner
    redis: RedisServer
    gateway: GatewayThread
    workers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        """The configuration of every process of this stack (workers, `finserve jobs resume`)."""
        return Settings(home=self.home, database_url=self.db_url, broker_url=self.redis.url,
                        gateway_url=self.gateway.url, api_key=self.worker_key, log_json=True)

    @property
    def env(self) -> dict[str, str]:
        return worker_env(self.settings, **FAST_JOBS_ENV)

    def start_worker(self, name: str, concurrency: int = 4, env: dict[str, str] | None = None) -> subprocess.Popen:
        """A worker process with the fast job settings, `env` (FINSERVE_* variables) over them."""
        with (self.home / f"worker-{name}.log").open("ab") as log:
            proc = start_worker(self.settings, concurrency=concurrency, name=f"{name}@%h", log=log,
                                extra_env=FAST_JOBS_ENV | (env or {}))
        self.workers.append(proc)
        return proc

    def cli(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([FINSERVE, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def restart_redis(self) -> None:
        """Stop Redis and start an empty one on the same port: everything queued is gone."""
        self.redis.stop()
        self.redis = RedisServer(port=self.redis.port, workdir=self.redis.workdir).start()

    def http(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.gateway.url, timeout=30,
                            headers={"Authorization": f"Bearer {key or self.api_key}"})

    def worker_logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.home.glob("worker-*.log")))

    def diagnose(self, job_id: str) -> str:
        """What a stuck job looks like from SQL and Redis, for a failing test's message."""
        from sqlalchemy import create_engine, select

        from core.db.jobs_models import ExtractionItem
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(select(ExtractionItem.id, ExtractionItem.status, ExtractionItem.attempts,
                                           ExtractionItem.error, ExtractionItem.lease_until).where(
                    ExtractionItem.job_id == job_id, ExtractionItem.status.in_(("pending", "running")))).all()
        finally:
            engine.dispose()
        r = redis.Redis.from_url(self.redis.url)
        state = {"queue": r.llen(QUEUE), "unacked": r.hlen("unacked"), "unacked_index": r.zcard("unacked_index"),
                 "unacked_mutex_ttl": r.ttl("unacked_mutex"), "keys": sorted(k.decode() for k in r.keys("*"))[:20]}
        lines = [f"unfinished items: {[tuple(x) for x in rows][:10]}", f"redis: {state}"]
        for item_id in [x[0] for x in rows][:3]:
            tag = f'"item_id": {item_id},'
            for p in sorted(self.home.glob("worker-*.log")):
                hits = [ln for ln in p.read_text(errors="replace").splitlines() if tag in ln]
                lines += [f"{p.name} item {item_id}: {ln[:400]}" for ln in hits[-8:]]
        return "\n".join(lines)

    def close(self) -> None:
        # The test is over: its workers are killed, not shut down warm (a warm shutdown waits out the items in
        # flight, ~3 s a test; `finserve up` stopping its workers on SIGTERM is tests/jobs/test_up.py's)
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(15)
        self.gateway.stop()
        self.redis.stop()


def start_stack(home: Path, db_url: str, api_key: str, worker_key: str, engine_client: LocalEngineClient) -> Stack:
    redis = RedisServer(workdir=home / "redis").start()
    use_broker(redis.url)  # the gateway (this process) enqueues to the test's Redis
    try:
        gateway = GatewayThread(Settings(home=home, database_url=db_url, log_json=True), engine_client).start()
    except Exception:
        redis.stop()
        raise
    return Stack(home, db_url, api_key, worker_key, redis, gateway)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
