"""A throwaway bulk-extraction stack for benchmarks and evaluations that measure the job path.

One process hosts the engine and the gateway (uvicorn on 127.0.0.1, SQLite in a temporary home);
Redis and the Celery workers are real separate processes, as in `finserve up`. The API keys are
made here: a client key (owns the jobs), a risk key (probes), and a worker key the workers use to
run each item as its job's owner. `close()` stops every process it started.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.keys import create_key
from core.settings import Settings
from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from jobs.runtime.celery_app import use_broker
from jobs.runtime.redis_server import RedisServer
from stack.processes import GatewayThread, start_worker, stop_worker

UNLIMITED_RPS = 1e9  # the stack's own keys must not be what limits throughput


class LocalJobStack:
    def __init__(self, home: Path, config: EngineConfig, *, workers: int = 1, in_flight: int = 16,
                 tenant: str = "bench") -> None:
        self.home, self.config, self.tenant = home, config, tenant
        self.db_url = f"sqlite:///{home / 'jobs.db'}"
        upgrade(self.db_url)
        self.db = make_engine(self.db_url)
        self.sessions = make_session_factory(self.db)
        with self.sessions() as s:
            self.client_key = create_key(s, tenant, rate_limit_rps=UNLIMITED_RPS)
            self.risk_key = create_key(s, f"{tenant}-risk", rate_limit_rps=UNLIMITED_RPS)
            self.worker_key = create_key(s, f"{tenant}-workers", worker=True, rate_limit_rps=UNLIMITED_RPS)
        self.engine = LocalEngineClient.launch(lambda: LLMEngine(config))
        self.redis: RedisServer | None = None
        self.gateway: GatewayThread | None = None
        self.workers: list[Any] = []
        try:
            self.redis = RedisServer(workdir=home / "redis").start()
            use_broker(self.redis.url)  # the gateway (this process) enqueues to this Redis
            self.gateway = GatewayThread(Settings(home=home, database_url=self.db_url, log_level="warning"),
                                         self.engine).start()
            worker_settings = Settings(home=home, database_url=self.db_url, broker_url=self.redis.url,
                                       gateway_url=self.gateway.url, api_key=self.worker_key, log_json=True)
            per_worker = max(1, in_flight // workers)
            for i in range(workers):
                with (home / f"worker{i}.log").open("wb") as log:
                    self.workers.append(start_worker(worker_settings, concurrency=per_worker,
                                                     name=f"local{i}@%h", log=log))
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    def worker_logs(self, tail_bytes: int = 3000) -> str:
        return "\n".join(p.read_text(errors="replace")[-tail_bytes:] for p in sorted(self.home.glob("worker*.log")))

    def close(self) -> None:
        for w in self.workers:
            stop_worker(w)
        self.workers = []
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        self.engine.shutdown()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        self.db.dispose()
