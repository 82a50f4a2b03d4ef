"""Write tests/ledger/data/chains_v1_v3.json: ledger chains as the code before the field registry chained them.

Run once, on the commit before ledger/fields.py (0cce8b2), from a copy of that tree:
    git archive 0cce8b2 | tar -x -C /tmp/orig
    PYTHONPATH=/tmp/orig python tests/ledger/data/make_chains_fixture.py tests/ledger/data/chains_v1_v3.json
tests/ledger/test_chain_versions.py loads the tables it dumps into a fresh database and verifies them with the
code of today: a chain written before a change must still verify after it.

Tenant `old-bank`: five rows chained as a gateway before migration 0009 did (chain v1; `o2` was interrupted
and chained again, its final row under v2, binding the superseded position), then two rows chained since
(v3, one with evidence hashes). Tenant `new-bank`: v3 rows only, with an interrupted row chained again (v3
binding its superseded position). One `running` row, never chained.
"""
from __future__ import annotations

import json
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from core.db.base import make_engine
from core.db.migrate import upgrade
from ledger import LedgerRow, LedgerWriter
from ledger.chain import GENESIS, HEADS, LEDGER, SUPERSEDED, legacy_row_hash

T0 = datetime(2025, 3, 3, 9, 0, 0, tzinfo=UTC)


def row(request_id: str, tenant: str, i: int, **kw: Any) -> LedgerRow:
    """A row whose columns vary the kinds a hash normalises: int-valued floats, None, bools, times."""
    fields: dict[str, Any] = dict(
        request_id=request_id, tenant=tenant, workload_class=("realtime_risk", "document_qa")[i % 2],
        class_rule="route", route="risk", status="finished", http_status=200, arrival_at=T0 + timedelta(seconds=60 * i),
        finish_reason="stop", queue_ms=5.0 + i, prefill_ms=45.25, ttft_ms=80.0 if i % 2 else 50.5 + i,
        tpot_ms=None if i == 3 else 10.125, e2e_ms=200.0 + i, input_tokens=100 + i, cached_tokens=16 * (i % 2),
        output_tokens=16, preemptions=i % 2, ttft_target_ms=100.0, tpot_target_ms=20.0, e2e_target_ms=1000.0,
        slo_goal=0.99, slo_percentile=99.0, ttft_met=True, tpot_met=None if i == 3 else True, e2e_met=True,
        slo_met=True, key_id=f"key{i % 3}", replica=None if i % 2 else "http://10.0.0.7:8100",
        replica_reason=None if i % 2 else "affinity", model_id="SmolLM2-135M-Instruct", weights_sha256="ab" * 32,
        weight_format="q4", policy_sha256="cd" * 32, finserve_version="0.1.0", client_request_id=f"client-{i}",
        timeline={"arrival": 1.0 + i, "gateway": "gw-1",
                  "steps": [{"kind": "prefill", "start": 1.0 + i, "end": 1.05 + i, "num_tokens": 100,
                             "batch_tokens": 100}]},
    )
    fields.update(kw)
    return LedgerRow(**fields)


def write(engine: Any, spool: Path, rows: list[LedgerRow]) -> None:
    writer = LedgerWriter(engine, spool_path=spool, flush_interval_s=0.01).start()
    for r in rows:
        writer.submit(r)
    assert writer.flush(timeout=30)
    writer.close()


def rehash_as_legacy(engine: Any, tenant: str) -> None:
    """Re-chain `tenant` as the code before migration 0009 did: every row under v1, an amended one under v2."""
    with engine.begin() as conn:
        rows = {r["chain_seq"]: dict(r) for r in conn.execute(select(LEDGER).where(LEDGER.c.tenant == tenant)).mappings()}
        sups = {s["seq"]: dict(s) for s in conn.execute(
            select(SUPERSEDED).where(SUPERSEDED.c.partition == tenant)).mappings()}
        prev = GENESIS
        for seq in range(1, max(rows | sups) + 1):
            if seq in sups:  # a superseded position keeps its hash; its link follows the re-chained one before
                sups[seq]["prev_hash"] = prev
                conn.execute(update(SUPERSEDED).where(SUPERSEDED.c.partition == tenant, SUPERSEDED.c.seq == seq)
                             .values(prev_hash=prev))
                prev = sups[seq]["row_hash"]
                continue
            r = rows[seq]
            bound = next((s for s in sups.values() if s["request_id"] == r["request_id"] and s["seq"] < seq), None)
            h = legacy_row_hash(prev, r, bound)
            conn.execute(update(LEDGER).where(LEDGER.c.request_id == r["request_id"]).values(prev_hash=prev, row_hash=h))
            prev = h
        conn.execute(update(HEADS).where(HEADS.c.partition == tenant).values(head_hash=prev))


def dump(engine: Any) -> dict[str, list[dict[str, Any]]]:
    def plain(v: Any) -> Any:
        return v.isoformat() if isinstance(v, datetime) else v

    out: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for name, table, order in (("request_ledger", LEDGER, LEDGER.c.request_id),
                                   ("ledger_chain_heads", HEADS, HEADS.c.partition),
                                   ("ledger_chain_superseded", SUPERSEDED, SUPERSEDED.c.seq)):
            out[name] = [{k: plain(v) for k, v in r.items()}
                         for r in conn.execute(select(table).order_by(order)).mappings()]
    return out


def main(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'chains.db'}"
        upgrade(url)
        engine = make_engine(url)
        spool = Path(tmp) / "spool.ndjson"
        write(engine, spool, [row(f"o{i}", "old-bank", i, **({"status": "interrupted", "http_status": 0}
                                                              if i == 2 else {})) for i in range(5)])
        write(engine, spool, [row("o2", "old-bank", 2)])
        rehash_as_legacy(engine, "old-bank")
        write(engine, spool, [row("o5", "old-bank", 5), row("o6", "old-bank", 6, input_sha256="01" * 32,
                                                            output_sha256="02" * 32)])
        write(engine, spool, [row(f"n{i}", "new-bank", i, **({"status": "interrupted", "http_status": 0}
                                                              if i == 1 else {"input_sha256": f"{i:02x}" * 32,
                                                                              "output_sha256": None}))
                              for i in range(4)])
        write(engine, spool, [row("n1", "new-bank", 1, status="failed", finish_reason="error", slo_met=False),
                              row("r0", "new-bank", 9, status="running", http_status=0)])
        doc = {"made_by": "tests/ledger/data/make_chains_fixture.py on commit 0cce8b2", **dump(engine)}
        engine.dispose()
    target.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
