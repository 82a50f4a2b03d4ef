"""Issue 45, finding 2: a batch line whose request was at the gateway when the gateway's process died is failed with
that reason after its one attempt, never retried into a crash loop (under `finserve up` a crashing line killed the
stack 3 s after the batch was created and again 6 s after each restart, for up to 40 transient retries).

A real gateway (`finserve serve`, its own process, the tiny model) is killed with SIGKILL while it compiles the
line's output constraint; the worker's code (process_item, the same code a Celery worker runs) sees the
connection drop and the gateway gone. A gateway that merely refuses a connection is still capacity trouble,
retried as before."""
from __future__ import annotations

import json
import os
import random
import signal
import string
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from core.db.base import make_engine, make_session_factory
from core.db.jobs_models import ITEM_FAILED, ITEM_PENDING, ITEM_RUNNING, ExtractionItem
from core.db.migrate import upgrade
from core.keys import create_key, verify_key
from core.settings import Settings
from jobs import batch, service
from jobs.gateway_client import GatewayClient
from jobs.redis_server import free_port
from jobs.worker import GATEWAY_LOST, Step, WorkerRuntime, process_item
from stack.processes import FINSERVE
from tests.jobs.stack import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> tuple[str, sessionmaker[Session], dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'lost.db'}"
    upgrade(url)
    sessions = make_session_factory(make_engine(url))
    with sessions() as s:
        keys = {"acme": create_key(s, "acme"), "worker": create_key(s, "ops", worker=True)}
    return url, sessions, keys


@pytest.fixture
def gateway(tmp_path: Path, home, make_tiny_model) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    url, _, _ = home
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FINSERVE_")} | {
        "FINSERVE_HOME": str(tmp_path), "FINSERVE_DATABASE_URL": url, "FINSERVE_THREADS": "1",
        "FINSERVE_MODEL": str(make_tiny_model(max_position_embeddings=8192)),
        "FINSERVE_KV_CACHE_MEMORY_BYTES": str(16 << 20), "FINSERVE_LOG_JSON": "true"}
    with (tmp_path / "gateway.log").open("wb") as log:
        proc = subprocess.Popen([FINSERVE, "serve", "--port", str(port)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(base), 120, "the gateway to be ready")
        yield proc, base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def one_line_batch(sessions: sessionmaker[Session], key: str, body: dict[str, object]) -> int:
    lines = batch.parse_file(json.dumps({"custom_id": "line-1", "method": "POST", "url": "/v1/chat/completions",
                                         "body": body}).encode(), max_lines=10)
    spec = batch.batch_spec(lines, "/v1/chat/completions", "bulk_extraction")
    with sessions() as s:
        owner = verify_key(s, key)
        assert owner is not None
        job, _ = service.create_job(s, "acme", spec, None, key_id=owner.key_id)
        return int(s.query(ExtractionItem.id).filter(ExtractionItem.job_id == job.id).scalar())


def runtime(base: str, home) -> WorkerRuntime:
    url, sessions, keys = home
    settings = Settings(database_url=url, gateway_url=base, api_key=keys["worker"], jobs_request_timeout_s=120)
    return WorkerRuntime(settings, sessions, GatewayClient(base, keys["worker"], 120))


def test_a_line_in_flight_when_the_gateway_died_fails_after_one_attempt(gateway, home) -> None:
    proc, base = gateway
    _, sessions, keys = home
    rnd = random.Random(45)
    # Seconds of compile at the gateway (1,999 long choices, the most allowed): the window to kill it in.
    choices = ["".join(rnd.choices(string.ascii_lowercase, k=100)) for _ in range(1999)]
    item_id = one_line_batch(sessions, keys["acme"], {"messages": [{"role": "user", "content": "pick"}], "max_tokens": 2,
                                        "guided_choice": choices})
    rt = runtime(base, home)
    steps: list[Step] = []
    worker = threading.Thread(target=lambda: steps.append(process_item(rt, item_id, 0)))
    worker.start()
    with sessions() as s:
        wait_until(lambda: s.get(ExtractionItem, item_id, populate_existing=True).status == ITEM_RUNNING, 60,
                   "the line to be claimed", interval_s=0.01)
    threading.Event().wait(0.3)  # its request sent: the gateway is compiling the choices
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    worker.join(60)
    (step,) = steps
    assert step.kind == "failed", step
    with sessions() as s:
        item = s.get(ExtractionItem, item_id)
        assert item is not None and item.status == ITEM_FAILED and item.attempts == 1
        assert item.error is not None and item.error.startswith(GATEWAY_LOST), item.error
        record = batch.output_record(item)
    assert record["error"]["code"] == batch.FAILED_CODE and GATEWAY_LOST in record["error"]["message"]


def test_a_gateway_that_is_not_there_is_still_retried(home) -> None:
    _, sessions, keys = home
    item_id = one_line_batch(sessions, keys["acme"], {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    step = process_item(runtime(f"http://127.0.0.1:{free_port()}", home), item_id, 0)  # nothing listens there
    assert step.kind == "retry" and "unreachable" in step.detail, step
    with sessions() as s:
        assert s.get(ExtractionItem, item_id).status == ITEM_PENDING  # handed back for a later attempt
