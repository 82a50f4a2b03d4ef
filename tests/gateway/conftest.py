"""Gateway fixtures: the REAL engine on a tiny random model, a migrated SQLite ledger, API keys,
and the app served either in-process (httpx ASGI transport) or by a real uvicorn server."""
from __future__ import annotations

import asyncio
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.keys import create_key
from core.settings import Settings
from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from policies import Policy, load_policy, policy_from_dict
from stack.app import create_app
from stack.processes import GatewayThread

KV_BYTES = 4 << 20  # 512 blocks of 16 tokens for the tiny model (512 B of KV per token)


def make_client(model_dir: Path, policy: Policy, **overrides: Any) -> LocalEngineClient:
    torch.set_num_threads(1)
    config = EngineConfig(model=str(model_dir), policy=policy, kv_cache_memory_bytes=KV_BYTES, threads=1,
                          max_num_batched_tokens=256, **overrides)
    return LocalEngineClient(LLMEngine(config)).start()


def policy_with(**class_overrides: dict[str, Any]) -> Policy:
    """The default policy with some class keys changed, e.g. policy_with(realtime_risk={"queue_limit": 1})."""
    data = tomllib.loads(resources.files("policies").joinpath("default.toml").read_text())
    for name, changes in class_overrides.items():
        data["classes"][name].update(changes)
    return policy_from_dict(data, source="<test>")


@pytest.fixture(scope="session")
def engine_client(tiny_model_dir: Path) -> Iterator[LocalEngineClient]:
    client = make_client(tiny_model_dir, load_policy())
    yield client
    client.shutdown()


@pytest.fixture(scope="session")
def smollm2(default_model_dir: Path) -> Iterator[LocalEngineClient]:
    """The REAL default model (SmolLM2-135M-Instruct), for tests of what it answers."""
    torch.set_num_threads(2)
    config = EngineConfig(model=str(default_model_dir), policy=load_policy(), kv_cache_memory_bytes=256 << 20,
                          threads=2)
    client = LocalEngineClient(LLMEngine(config)).start()
    yield client
    client.shutdown()


@dataclass
class Keys:
    acme: str  # tenant acme, every class
    acme_admin: str
    globex: str  # another tenant
    risk_only: str  # tenant acme, realtime_risk only
    slow: str  # tenant acme, 0.5 requests/s (burst of 1)


@pytest.fixture(scope="session")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('gateway_db') / 'finserve.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def keys(db_url: str) -> Keys:
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        k = Keys(
            acme=create_key(s, "acme"),
            acme_admin=create_key(s, "acme", admin=True),
            globex=create_key(s, "globex"),
            risk_only=create_key(s, "acme", classes=["realtime_risk"]),
            slow=create_key(s, "acme", rate_limit_rps=0.5),
        )
    engine.dispose()
    return k


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(home=tmp_path, database_url=db_url, log_json=True)


@pytest.fixture
async def app(settings: Settings, engine_client: LocalEngineClient) -> AsyncIterator[Any]:
    application = create_app(settings, engine_client=engine_client)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        yield c


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class LiveServer:
    url: str
    app: Any

    @property
    def state(self) -> Any:
        return self.app.state.finserve


@pytest.fixture
def live_server(settings: Settings, engine_client: LocalEngineClient) -> Iterator[LiveServer]:
    """The app behind a real uvicorn server on 127.0.0.1 (streams and disconnects are real)."""
    gateway = GatewayThread(settings, engine_client).start()
    yield LiveServer(gateway.url, gateway.app)
    gateway.stop()


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()
