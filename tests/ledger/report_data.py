"""A day of ledger rows that looks like production, for the rendered-report tests and docs/report.png.

Three classes over DAY_SINCE..DAY_UNTIL (24 h): realtime_risk and document_qa meet
every target all day (both at 100%, the case where one line used to hide the
other); bulk_extraction runs a job over the window's last 4 hours and misses
every item of its last 45 minutes, so its 1 h and 5 min burn rates page. Two tenants, acme and globex. Deterministic (seeded).
"""
from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.db.models import RequestLedger
from ledger import LedgerRow
from ledger.reports import build_report
from tests.ledger.factories import T0, make_row

DAY_SINCE = T0
DAY_UNTIL = T0 + timedelta(hours=24)
RISK = dict(workload_class="realtime_risk", route="risk", ttft_target_ms=1000.0, tpot_target_ms=500.0,
            e2e_target_ms=32500.0, slo_goal=0.99, slo_percentile=99.0)
DOCS = dict(workload_class="document_qa", route="documents", ttft_target_ms=20000.0, tpot_target_ms=600.0,
            e2e_target_ms=330000.0, slo_goal=0.95, slo_percentile=95.0)
BULK = dict(workload_class="bulk_extraction", route="jobs", ttft_target_ms=None, tpot_target_ms=None,
            e2e_target_ms=600000.0, slo_goal=0.95, slo_percentile=95.0)


def day_rows(seed: int = 7) -> list[LedgerRow]:
    rng = random.Random(seed)
    rows: list[LedgerRow] = []
    for i in range(240):  # every 6 minutes, all met
        ttft = rng.uniform(150, 700)
        rows.append(make_row(f"risk-{i}", at_s=i * 360 + rng.uniform(0, 300), tenant=rng.choice(("acme", "globex")),
                             ttft_ms=ttft, tpot_ms=rng.uniform(40, 200), e2e_ms=ttft + rng.uniform(500, 3000),
                             output_tokens=20, ttft_met=True, tpot_met=True, e2e_met=True, slo_met=True, **RISK))
    for i in range(60):  # business hours only, all met: 60 < 100, so their p99 is flagged as resting on few requests
        ttft = rng.uniform(900, 12000)
        rows.append(make_row(f"doc-{i}", at_s=8 * 3600 + i * 540, tenant="acme", ttft_ms=ttft,
                             tpot_ms=rng.uniform(100, 500), e2e_ms=ttft + rng.uniform(5000, 60000),
                             input_tokens=3000, output_tokens=200, ttft_met=True, tpot_met=True, e2e_met=True,
                             slo_met=True, **DOCS))
    for i in range(400):  # an item every 36 s from 20 h in; from 23 h 15 min every item runs past its 10-minute target
        at = 20 * 3600 + i * 36
        miss = at >= 23 * 3600 + 900
        e2e = rng.uniform(700_000, 900_000) if miss else rng.uniform(60_000, 400_000)
        rows.append(make_row(f"bulk-{i}", at_s=at, tenant="globex", ttft_ms=rng.uniform(2000, 30000),
                             tpot_ms=rng.uniform(200, 900), e2e_ms=e2e, input_tokens=1500, output_tokens=300,
                             e2e_met=not miss, slo_met=not miss, **BULK))
    return rows


def build_day_report(db_path: Path) -> dict[str, Any]:
    """The report over day_rows(), from a fresh SQLite ledger at db_path."""
    url = f"sqlite:///{db_path}"
    upgrade(url)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as s:
            s.add_all(RequestLedger(**r.to_dict()) for r in day_rows())
            s.commit()
            return build_report(s, DAY_SINCE, DAY_UNTIL)
    finally:
        engine.dispose()
