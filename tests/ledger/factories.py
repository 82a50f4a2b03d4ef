"""Ledger rows for tests, with only the fields a test cares about spelled out."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ledger import LedgerRow

T0 = datetime(2025, 3, 3, 9, 0, 0, tzinfo=UTC)


def make_row(request_id: str, *, at_s: float = 0.0, **kw: Any) -> LedgerRow:
    fields: dict[str, Any] = dict(
        request_id=request_id, tenant="acme", workload_class="realtime_risk", class_rule="route",
        route="risk", status="finished", http_status=200, arrival_at=T0 + timedelta(seconds=at_s),
        finish_reason="stop", ttft_ms=50.0, tpot_ms=10.0, e2e_ms=200.0, queue_ms=5.0, prefill_ms=45.0,
        input_tokens=100, output_tokens=16, slo_met=True,
        timeline={"arrival": 1.0, "steps": [{"kind": "prefill", "start": 1.0, "end": 1.05, "num_tokens": 100,
                                             "batch_tokens": 100}]},
    )
    fields.update(kw)
    return LedgerRow(**fields)
