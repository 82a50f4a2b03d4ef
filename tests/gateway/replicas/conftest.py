"""Replica fixtures: engine servers (the real app, real uvicorn on 127.0.0.1, tiny random model, 1 thread)."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from core.settings import Settings
from engine.client import LocalEngineClient
from engine.request import EngineRequest, SamplingParams
from gateway.replicas.replica_set import ReplicaSet
from gateway.replicas.server import create_engine_app
from jobs.runtime.redis_server import free_port
from policies import load_policy
from tests.gateway.conftest import KV_BYTES, make_client


class ServerThread:
    """An ASGI app behind uvicorn on 127.0.0.1 in a thread; `stop()` closes it, `start()` may reopen the port."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        self.app, self.port = app, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ServerThread:
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_config=None,
                                                     access_log=False, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(15)


def engine_settings(model_dir: Path, home: Path) -> Settings:
    return Settings(home=home, model=model_dir, threads=1, kv_cache_memory_bytes=4 * KV_BYTES)


@pytest.fixture(scope="module")
def replica_servers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[list[tuple[ServerThread, LocalEngineClient]]]:
    """Two engine servers, each with an engine of its own."""
    home = tmp_path_factory.mktemp("replicas")
    made = []
    for _ in range(2):
        client = make_client(tiny_model_dir, load_policy())
        server = ServerThread(create_engine_app(engine_settings(tiny_model_dir, home), engine_client=client)).start()
        made.append((server, client))
    yield made
    for server, client in made:
        server.stop()
        client.shutdown()


def make_set(urls: list[str], model_dir: Path, **kwargs: object) -> ReplicaSet:
    from engine.tokenizer import Tokenizer

    policy = load_policy()
    settings = engine_settings(model_dir, Path("."))
    return ReplicaSet(urls, tokenizer=Tokenizer.from_folder(model_dir), policy=policy,
                      config=settings.engine_config(policy), probe_interval_s=0.2, **kwargs)  # type: ignore[arg-type]


def request(rid: str, ids: list[int], cls: str = "document_qa", *, max_tokens: int = 4, salt: str = "acme"
            ) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_token_ids=ids, sampling=SamplingParams(max_tokens=max_tokens),
                         workload_class=cls, cache_salt=salt)


def run(coro_fn: Callable[[], object]) -> object:
    return asyncio.run(coro_fn())  # type: ignore[arg-type]
