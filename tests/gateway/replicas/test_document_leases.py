"""Document leases end to end: a question through the gateway leases its document's KV blocks on the replica
that served it (lease_s travels on the replica wire), so a burst of bulk work on that replica cannot evict
them; with the class's kv_lease_s at 0 the same burst does."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from gateway.replicas.server import create_engine_app
from policies import load_policy
from stack.processes import GatewayThread
from tests.gateway.conftest import Keys, auth, make_client
from tests.gateway.replicas.conftest import ServerThread, engine_settings
from tests.policies.conftest import default_policy_dict, dump_toml

pytestmark = pytest.mark.slow

POOL_BLOCKS = 64  # of 16 tokens: the leased document (27 blocks) leaves room for one bulk prompt (22) at a time
DOC = " ".join(f"Article {i}: the bank holds capital against exposure {i * 7}." for i in range(24))


@pytest.fixture(params=[900, 0], ids=["leased", "not-leased"])
def gateway(request: pytest.FixtureRequest, settings: Settings, tiny_model_dir: Path, tmp_path: Path
            ) -> Iterator[GatewayThread]:
    # One policy file for the gateway (it sets lease_s from it) and the engine; bulk may use the whole pool,
    # so its burst evicts whatever cached blocks it is allowed to.
    data = default_policy_dict()
    data["classes"]["document_qa"]["kv_lease_s"] = request.param
    data["classes"]["bulk_extraction"]["kv_max_share"] = 1.0
    path = tmp_path / "policy.toml"
    path.write_text(dump_toml(data))
    client = make_client(tiny_model_dir, load_policy(path), kv_cache_num_blocks=POOL_BLOCKS)
    server = ServerThread(create_engine_app(engine_settings(tiny_model_dir, tmp_path), engine_client=client)).start()
    gw = GatewayThread(settings.model_copy(update={"model": tiny_model_dir, "engines": server.url, "policy": path}),
                       None).start()
    deadline = time.monotonic() + 30
    while httpx.get(f"{gw.url}/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    yield gw
    gw.stop()
    server.stop()
    client.shutdown()


def bulk_burst(url: str, key: str, n: int = 6) -> None:
    def one(i: int) -> None:
        text = " ".join(f"Clause {i}.{j}: party {i * 31 + j} pays {j * 13} on demand." for j in range(18))
        r = httpx.post(f"{url}/v1/chat/completions", headers=auth(key), timeout=120, json={
            "messages": [{"role": "user", "content": text}], "max_tokens": 4, "workload_class": "bulk_extraction"})
        assert r.status_code == 200, r.text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_leased_document_survives_a_bulk_burst(gateway: GatewayThread, keys: Keys,
                                                 request: pytest.FixtureRequest) -> None:
    leased = request.node.callspec.id == "leased"
    h = auth(keys.acme)
    doc = httpx.post(f"{gateway.url}/v1/documents", headers=h, json={"title": "Rules", "text": DOC}).json()
    ask = f"{gateway.url}/v1/documents/{doc['id']}/questions"
    first = httpx.post(ask, headers=h, json={"question": "What capital?", "max_tokens": 2}, timeout=60).json()
    assert first["usage"]["prompt_tokens"] > 16 * 12  # the document fills most of the pool's free blocks
    bulk_burst(gateway.url, keys.acme)
    again = httpx.post(ask, headers=h, json={"question": "Which exposure?", "max_tokens": 2}, timeout=60).json()
    if leased:
        assert again["usage"]["cached_tokens"] >= doc["num_tokens"] // 2  # the document came from the cache
    else:
        assert again["usage"]["cached_tokens"] < 16 * 4  # evicted by the burst
