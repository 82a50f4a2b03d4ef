"""GET /v1/slo/report with a rolling `window`, per-tenant figures and the error budget."""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from core.db.base import make_engine, make_session_factory
from core.db.models import RequestLedger
from tests.gateway.conftest import Keys, auth
from tests.ledger.factories import T0, make_row

# A month of its own, long before the other gateway tests' requests (they share this ledger).
UNTIL = datetime(2024, 6, 1, tzinfo=timezone.utc)
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
    assert [(x["scope"], x["tenant"], x["requests"], x["slo_missed"]) for x in rows] == [("class", "acme", "5", "1")]
    empty = await client.get("/v1/slo/report", headers=admin, params={**params, "window": "1h"})
    assert empty.text.startswith("scope,tenant,workload_class,") and empty.text.count("\n") == 1


async def test_bad_windows_are_invalid_requests(client: httpx.AsyncClient, keys: Keys) -> None:
    admin = auth(keys.acme_admin)
    for params in ({"window": "4 weeks"}, {"window": "0d"}, {"window": "7d", "since": "2024-05-01T00:00:00"}):
        r = await client.get("/v1/slo/report", headers=admin, params=params)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", params
