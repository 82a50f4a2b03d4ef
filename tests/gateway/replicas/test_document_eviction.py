"""Deleting a document with engine replicas: the gateway's ReplicaSet asks every replica to evict the document's
prefix (POST /v1/engine/evict-prefix), so the replica that served its questions frees their leased blocks at
once; a replica that cannot be reached evicts nothing and the deletion still succeeds."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from gateway.domain.document_cache import document_prefix
from gateway.replicas.server import create_engine_app
from jobs.runtime.redis_server import free_port
from policies import load_policy
from stack.processes import GatewayThread
from tests.gateway.conftest import Keys, auth, make_client
from tests.gateway.replicas.conftest import ServerThread, engine_settings

pytestmark = pytest.mark.slow

TEXT = " ".join(f"Section {i}: the firm reports exposure {i * 11} to its supervisor each quarter." for i in range(16))


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_deleting_a_document_evicts_its_blocks_on_the_replica(settings: Settings, tiny_model_dir: Path,
                                                              tmp_path: Path, keys: Keys) -> None:
    client = make_client(tiny_model_dir, load_policy())
    server = ServerThread(create_engine_app(engine_settings(tiny_model_dir, tmp_path), engine_client=client)).start()
    unreachable = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = GatewayThread(settings.model_copy(update={"model": tiny_model_dir, "engines": f"{server.url},{unreachable}"}),
                       None).start()
    h = auth(keys.acme)
    try:
        assert until(lambda: httpx.get(f"{gw.url}/readyz").status_code == 200, 30)

        def create() -> str:
            r = httpx.post(f"{gw.url}/v1/documents", headers=h, json={"title": "Reports", "text": TEXT})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        def cached(doc_id: str) -> int:
            r = httpx.post(f"{gw.url}/v1/documents/{doc_id}/questions", headers=h, timeout=60,
                           json={"question": "When are reports due?", "max_tokens": 2})
            assert r.status_code == 200, r.text
            return int(r.json()["usage"]["cached_tokens"])

        doc = create()
        cached(doc)
        assert cached(doc) > 16 * 8  # the document came from the replica's cache
        keep = document_prefix(client.tokenizer, "Reports", TEXT, "acme").keep_tokens // 16
        assert client.stats().leased_blocks > keep + 8
        assert httpx.delete(f"{gw.url}/v1/documents/{doc}", headers=h).status_code == 200
        # the replica's pool: only the head every document prompt starts with is still cached (and leased)
        assert until(lambda: client.stats().leased_blocks == keep and client.stats().cached_blocks == keep)
        assert cached(create()) == keep * 16  # the same text again: a cache miss past the head
    finally:
        gw.stop()
        server.stop()
        client.shutdown()
