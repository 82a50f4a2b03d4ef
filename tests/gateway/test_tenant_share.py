"""One tenant's burst is refused to that tenant (429), another tenant's request is still admitted and
served first (issue 23 finding 4), through the gateway and the real engine on a tiny model."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from engine.client import LocalEngineClient
from stack.app import create_app
from tests.gateway.conftest import Keys, auth, make_client, policy_with, wait_for


@pytest.fixture
async def shared_queue(tiny_model_dir: Path, settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                                        LocalEngineClient]]:
    """realtime_risk with one batch slot and a queue of 4, half of it per tenant."""
    policy = policy_with(realtime_risk={"max_running": 1, "queue_limit": 4, "tenant_queue_share": 0.5,
                                        "max_output_tokens": 512})
    engine = make_client(tiny_model_dir, policy)
    app = create_app(settings, engine_client=engine)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                yield c, engine
    finally:
        engine.shutdown()


async def test_a_burst_is_refused_to_its_tenant_and_another_tenant_is_served_next(shared_queue, keys: Keys):
    c, engine = shared_queue
    risk = {"X-Workload-Class": "realtime_risk"}
    long = {"prompt": "Margin call", "max_tokens": 400, "ignore_eos": True}
    short = {"prompt": "Wire transfer", "max_tokens": 2, "ignore_eos": True}
    stats = engine.stats
    burst = [asyncio.create_task(c.post("/v1/completions", headers={**auth(keys.globex), **risk}, json=long))]
    assert await wait_for(lambda: stats().per_class["realtime_risk"].running == 1)
    burst += [asyncio.create_task(c.post("/v1/completions", headers={**auth(keys.globex), **risk}, json=short))
              for _ in range(2)]
    assert await wait_for(lambda: stats().per_class["realtime_risk"].waiting == 2)
    refused = await c.post("/v1/completions", headers={**auth(keys.globex), **risk}, json=short)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "queue_full" and "'globex'" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    # The class queue has room (2 of 4), and acme holds none of it: admitted, and ahead of globex's backlog.
    mine = asyncio.create_task(c.post("/v1/completions", headers={**auth(keys.acme), **risk}, json=long))
    assert await wait_for(lambda: stats().per_class["realtime_risk"].waiting == 3)
    burst[0].cancel()  # the long request frees the one slot: the next one to start is acme's

    def running_tenants() -> list[str]:
        return [r.tenant for r in list(engine.engine.scheduler.running.values())]

    assert await wait_for(lambda: running_tenants() == ["acme"])
    # globex's two still wait behind it (waited for: the stats snapshot is taken after the step that
    # moved acme's request into the running set, which the scheduler read above can see first)
    assert await wait_for(lambda: stats().per_class["realtime_risk"].waiting == 2)
    mine.cancel()
    results = await asyncio.gather(*burst[1:])
    assert [r.status_code for r in results] == [200, 200]
    await asyncio.gather(burst[0], mine, return_exceptions=True)
    assert stats().per_class["realtime_risk"].rejections.get("tenant_queue_full") == 1


def test_a_refusal_for_the_tenants_share_does_not_count_against_the_class():
    """The burst is its tenant's doing (like a rate limit): not a miss of the class's SLO, unlike a full queue."""
    from ledger.row import slo_flags
    from policies import load_policy

    slo = load_policy().get("realtime_risk").slo
    assert slo_flags("rejected", None, slo, http_status=429, rejection_reason="tenant_queue_full")[3] is None
    assert slo_flags("rejected", None, slo, http_status=429, rejection_reason="queue_full")[3] is False
