"""GET /v1/slo/report with a rolling `window`, per-tenant figures and the error budget."""
from __future__ import annotations

import asyncio
import csv
import io
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from core.db.base import make_engine, make_session_factory
from core.db.jobs_models import ITEM_RUNNING, ExtractionItem, ExtractionJob
from core.db.models import RequestLedger
from core.keys import JOB_ITEM_HEADER, create_key, verify_key
from stack.app import create_app
from tests.gateway.conftest import Keys, auth
from tests.ledger.factories import T0, make_row

# A month of its own, long before the other gateway tests' requests (they share this ledger).
UNTIL = datetime(2024, 6, 1, tzinfo=UTC)
RISK = dict(workload_class="realtime_risk", ttft_target_ms=80.0, slo_goal=0.9, slo_percentile=99.0)


@pytest.fixture(scope="module")
def old_rows(db_url: str) -> None:
    base = (UNTIL - T0).total_seconds()  # make_row's at_s counts from T0
    rows = [make_row(f"route-{d}-{i}", at_s=base - d * 86400 + i, tenant=t, slo_met=i > 0, **RISK)
            for d, t in ((2, "acme"), (10, "globex"), (40, "acme")) for i in range(5)]
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        s.add_all(RequestLedger(**r.to_dict()) for r in rows)
        s.commit()
    engine.dispose()


async def test_default_window_is_28_days(client: httpx.AsyncClient, keys: Keys, old_rows: None) -> None:
    r = await client.get("/v1/slo/report", headers=auth(keys.acme_admin), params={"until": UNTIL.isoformat()})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert rep["window"]["since"] == (UNTIL - timedelta(days=28)).isoformat()
    risk = rep["classes"]["realtime_risk"]
    assert (risk["requests"], risk["slo"]["missed"]) == (10, 2)  # days 2 and 10; day 40 is outside
    assert risk["error_budget"]["allowed_misses"] == pytest.approx(1.0) and risk["error_budget"]["remaining"] == -1.0
    # 3 days: day 2's 5 requests, 1 missed -> (1/5) / 0.1 = 2x; nothing in the last 6 h -> no ticket.
    assert risk["error_budget"]["burn_rates"]["3d"]["burn_rate"] == pytest.approx(2.0)
    assert risk["error_budget"]["alert_state"] == "ok"
    assert set(rep["tenants"]) == {"acme", "globex"}


async def test_window_tenant_and_csv(client: httpx.AsyncClient, keys: Keys, old_rows: None) -> None:
    admin = auth(keys.acme_admin)
    params = {"until": UNTIL.isoformat(), "window": "7d", "tenant": "acme", "format": "csv"}
    r = await client.get("/v1/slo/report", headers=admin, params=params)
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(x["scope"], x["tenant"], x["requests"], x["slo_missed"]) for x in rows] == [
        ("class", "acme", "5", "1"), ("version", "acme", "5", "")]  # rows from before versions: one, unknown
    empty = await client.get("/v1/slo/report", headers=admin, params={**params, "window": "1h"})
    assert empty.text.startswith("scope,tenant,workload_class,") and empty.text.count("\n") == 1


async def test_bad_windows_are_invalid_requests(client: httpx.AsyncClient, keys: Keys) -> None:
    admin = auth(keys.acme_admin)
    for params in ({"window": "4 weeks"}, {"window": "0d"}, {"window": "7d", "since": "2024-05-01T00:00:00"}):
        r = await client.get("/v1/slo/report", headers=admin, params=params)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", params


async def test_job_items_are_their_owners_requests_in_the_ledger_and_the_report(
        client: httpx.AsyncClient, keys: Keys, db_url: str) -> None:
    """A worker of tenant "ops" runs one item of an acme job and one of a globex job: each ledger row carries
    the job owner's tenant and key id, never the worker's, and each tenant's report counts its own item."""
    since = datetime.now(UTC)
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        worker_raw = create_key(s, "ops", worker=True)
        worker_id = verify_key(s, worker_raw).key_id
        owners = {t: verify_key(s, raw).key_id for t, raw in (("acme", keys.acme), ("globex", keys.globex))}
        items = {}
        for tenant, key_id in owners.items():
            job = ExtractionJob(id=f"job-{tenant}-{since.timestamp()}", tenant=tenant, key_id=key_id,
                                workload_class="bulk_extraction", schema_json="{}", max_tokens=4, num_items=1,
                                request_hash="-")
            item = ExtractionItem(job_id=job.id, seq=0, external_id="c1", text="x", status=ITEM_RUNNING,
                                  attempts=1, invalid_outputs=0, lease_until=since + timedelta(minutes=10))
            s.add(job)
            s.flush()  # the item's foreign key needs its job first
            s.add(item)
            s.flush()
            items[tenant] = item.id
        s.commit()
    engine.dispose()
    rids = {}
    for tenant, item_id in items.items():
        r = await client.post("/v1/chat/completions", headers={**auth(worker_raw), JOB_ITEM_HEADER: str(item_id)},
                              json={"messages": [{"role": "user", "content": "Extract."}], "max_tokens": 2,
                                    "temperature": 0})
        assert r.status_code == 200, r.text
        rids[tenant] = r.headers["x-request-id"]
    owner_keys = {"acme": keys.acme, "globex": keys.globex}
    for tenant, rid in rids.items():
        record = (await client.get(f"/v1/requests/{rid}", headers=auth(owner_keys[tenant]))).json()
        assert record["key_id"] == owners[tenant] != worker_id
        served = record["served_by"]
        assert served["model_id"] and served["finserve_version"] and len(served["weights_sha256"]) == 64
        assert served["weight_format"] in ("fp32", "bf16", "int8", "q4")  # what the engine resolved, not "auto"
    params = {"since": since.isoformat(), "until": (datetime.now(UTC) + timedelta(seconds=1)).isoformat()}
    for tenant in ("acme", "globex", "ops"):
        rep = (await client.get("/v1/slo/report", headers=auth(keys.acme_admin),
                                params={**params, "tenant": tenant})).json()
        assert sum(c["requests"] for c in rep["classes"].values()) == (0 if tenant == "ops" else 1), tenant
        assert rep["ledger"]["verified"] is True


async def test_the_gateway_drops_old_timelines_at_start_and_reports_still_work(
        settings, engine_client, keys: Keys, db_url: str) -> None:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    rows = [make_row(f"keep-tl-{now.timestamp()}", at_s=(now - T0).total_seconds() - 86400, tenant="retention"),
            make_row(f"drop-tl-{now.timestamp()}", at_s=(now - T0).total_seconds() - 9 * 86400, tenant="retention")]
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        s.add_all(RequestLedger(**r.to_dict()) for r in rows)
        s.commit()
    application = create_app(settings.model_copy(update={"ledger_timeline_retention_days": 7.0}),
                             engine_client=engine_client)
    async with application.router.lifespan_context(application):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://gw") as c:
            for _ in range(100):  # the retention task runs right after start, off the event loop
                with make_session_factory(engine)() as s:
                    kept = {r.request_id: r.timeline for r in s.query(RequestLedger).filter_by(tenant="retention")}
                if kept[rows[1].request_id] is None:
                    break
                await asyncio.sleep(0.05)
            rep = (await c.get("/v1/slo/report", headers=auth(keys.acme_admin),
                               params={"tenant": "retention", "window": "28d"})).json()
    engine.dispose()
    assert kept[rows[1].request_id] is None and kept[rows[0].request_id] is not None
    assert rep["classes"]["realtime_risk"]["requests"] == 2
