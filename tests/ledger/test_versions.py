"""Every ledger row says what served it; the weights are hashed once per file version; a report spanning
a change of version gives each combination's share."""
from __future__ import annotations

import csv
import io
import os
from datetime import timedelta

import pytest
from sqlalchemy import select

from core.db.models import RequestLedger
from ledger import LedgerWriter, versions
from ledger.reports import build_report, render_report
from ledger.versions import Versions, weights_sha256
from tests.ledger.factories import T0, make_row

OLD = Versions(model_id="m", weights_sha256="a" * 64, weight_format="int8", policy_sha256="p" * 64,
               finserve_version="0.1.0")
NEW = Versions(model_id="m", weights_sha256="b" * 64, weight_format="q4", policy_sha256="p" * 64,
               finserve_version="0.1.0")


def test_weights_are_hashed_once_per_file_version(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model-1.safetensors").write_bytes(b"x" * 1000)
    (model / "model-2.safetensors").write_bytes(b"y" * 10)
    (model / "config.json").write_text("{}")  # not weights
    cache = tmp_path / "cache.json"
    first = weights_sha256(model, cache)
    assert first is not None and len(first) == 64 and cache.exists()

    def no_hashing(path):
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(versions, "_file_sha256", no_hashing)
    assert weights_sha256(model, cache) == first  # same path, size and mtime: from the cache
    monkeypatch.undo()
    (model / "model-2.safetensors").write_bytes(b"z" * 10)  # same size, new content and mtime
    os.utime(model / "model-2.safetensors", ns=(1, 1))
    assert weights_sha256(model, cache) not in (None, first)
    assert weights_sha256(tmp_path / "nothing-here", cache) is None


@pytest.fixture
def writer(db_engine, tmp_path):
    w = LedgerWriter(db_engine, spool_path=tmp_path / "spool.ndjson", flush_interval_s=0.01).start()
    yield w
    w.close()


def test_rows_carry_the_versions_that_served_them(writer, db_engine):
    writer.versions = Versions(model_id="m", weights_sha256="a" * 64, policy_sha256="p" * 64, finserve_version="1")
    writer.weight_format_probe = lambda: "int8"  # the engine finished loading
    writer.submit(make_row("r1", key_id="k1"))
    writer.submit(make_row("r2", **{"model_id": "old", "finserve_version": "0.0.9"}))  # replayed: keeps its own
    assert writer.flush()
    with db_engine.connect() as conn:
        rows = {r.request_id: r for r in conn.execute(select(RequestLedger))}
    r1 = rows["r1"]
    assert (r1.model_id, r1.weights_sha256, r1.weight_format, r1.finserve_version, r1.key_id) == \
        ("m", "a" * 64, "int8", "1", "k1")
    assert (rows["r2"].model_id, rows["r2"].finserve_version) == ("old", "0.0.9")


def test_a_report_spanning_a_version_change_gives_each_share(writer, session):
    writer.versions = OLD
    for i in range(3):
        writer.submit(make_row(f"old{i}", at_s=i))
    assert writer.flush()
    writer.versions = NEW
    writer.submit(make_row("new0", at_s=10))
    writer.submit(make_row("run", at_s=11, status="running", http_status=0))  # in flight: not counted
    assert writer.flush()
    rep = build_report(session, T0, T0 + timedelta(minutes=5))
    got = [(v["weights_sha256"][0], v["weight_format"], v["requests"], v["share"]) for v in rep["versions"]]
    assert got == [("a", "int8", 3, 0.75), ("b", "q4", 1, 0.25)]
    assert rep["ledger"]["verified"] is True and rep["ledger"]["rows_checked"] == 4
    lines = [r for r in csv.DictReader(io.StringIO(render_report(rep, "csv"))) if r["scope"] == "version"]
    assert [(r["weight_format"], r["requests"], r["version_share"]) for r in lines] == [("int8", "3", "0.75"),
                                                                                      ("q4", "1", "0.25")]
    html = render_report(rep, "html")
    assert "aaaaaaaaaaaa" in html and "75.0%" in html and "Ledger verified" in html
