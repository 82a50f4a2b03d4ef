"""`finserve timeline REQUEST_ID` against a real ledger database (SQLite, migrated)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.db.models import RequestLedger
from finserve.cli import app
from ledger import LedgerRow, row_from_engine_request
from tests.ledger.factories import make_row

T = 1_700_000_000.0


def _long_decode_timeline(n_decode: int = 30) -> dict:
    """Prefill in two chunks, then n_decode 10 ms steps 1 ms apart; step 17 is slow, and a
    50 ms wait (the request sat out steps) comes before step 25: 51 ms between steps 24 and 25."""
    steps = [{"kind": "prefill", "start": T + 0.010, "end": T + 0.030, "num_tokens": 64, "batch_tokens": 64},
             {"kind": "prefill", "start": T + 0.030, "end": T + 0.045, "num_tokens": 36, "batch_tokens": 40}]
    t = T + 0.046
    for i in range(1, n_decode + 1):
        if i == 25:
            t += 0.050
        took = 0.040 if i == 17 else 0.010
        steps.append({"kind": "decode", "start": t, "end": t + took, "num_tokens": 1,
                      "batch_tokens": 300 if i == 17 else 2})
        t += took + 0.001
    return {"arrival": T, "tokenize_start": T + 0.001, "tokenized": T + 0.004, "first_scheduled": T + 0.010,
            "first_token": T + 0.045, "finished": t, "steps": steps}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    monkeypatch.setenv("FINSERVE_DATABASE_URL", url)
    engine = make_engine(url)

    def insert(row: LedgerRow) -> None:
        with make_session_factory(engine)() as s:
            s.add(RequestLedger(**row.to_dict()))
            s.commit()

    yield insert
    engine.dispose()


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _step_lines(output: str, kind: str) -> list[str]:
    """Rows of single steps (not the '... decode step 1 to step 30' summary of a collapsed run)."""
    return [ln for ln in output.splitlines() if re.search(rf"\b{kind} (step|chunk) \d+\s", ln) and "..." not in ln]


def test_path_from_arrival_to_stop_with_collapsed_decode(ledger) -> None:
    ledger(make_row("req-long", timeline=_long_decode_timeline(), finish_reason="length", output_tokens=31))
    res = _cli("timeline", "req-long")
    assert res.exit_code == 0, res.output
    out = res.output[res.output.index("start ms"):]  # the path, below the request's summary
    order = [out.index(s) for s in ("tokenize", "queue", "prefill chunk 1", "prefill chunk 2", "decode step 1 ",
                                    "decode step 30", "stop (length)")]
    assert order == sorted(order)
    assert re.search(r"\s3\.00\s+tokenize", out)  # tokenized 1 ms -> 4 ms after arrival
    assert re.search(r"prefill chunk 2\s+36\s+40", out)  # its tokens and the whole step's
    # 30 decode steps collapse: the first, the last and the slowest are listed, not all 30.
    assert re.search(r"46\.00\s+409\.00\s+\.\.\. decode step 1 to step 30: 30 steps, 30 tokens", out)
    assert "slowest: decode step 17" in out and re.search(r"40\.00\s+slowest: decode step 17\s+1\s+300", out)
    assert "long wait: waiting (not scheduled)" in out and re.search(r"51\.00\s+long wait", out)
    assert len(_step_lines(out, "decode")) == 3  # step 1, slowest step 17, step 30
    assert "prefill: 2 chunk(s), 100 tokens, 35.00 ms; decode: 30 step(s), 30 tokens" in out


def test_all_lists_every_decode_step(ledger) -> None:
    ledger(make_row("req-long", timeline=_long_decode_timeline()))
    res = _cli("timeline", "req-long", "--all")
    assert res.exit_code == 0, res.output
    assert len(_step_lines(res.output, "decode")) == 30
    assert "30 steps, 30 tokens" not in res.output


def test_html_report_written(ledger, tmp_path: Path) -> None:
    ledger(make_row("req-html", timeline=_long_decode_timeline()))
    page = tmp_path / "out" / "req.html"
    res = _cli("timeline", "req-html", "--html", str(page))
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "<svg" in html and "req-html" in html and "decode step 30" in html


def test_unknown_request_is_a_clear_error(ledger) -> None:
    res = _cli("timeline", "nope")
    assert res.exit_code == 1
    assert res.stderr.startswith("error: no request 'nope' in the ledger") and res.stderr.count("\n") == 1


def test_json_output_has_the_row_and_every_phase(ledger) -> None:
    ledger(make_row("req-json", timeline=_long_decode_timeline(), finish_reason="length", output_tokens=31))
    res = _cli("timeline", "req-json", "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["request"]["request_id"] == "req-json" and doc["request"]["output_tokens"] == 31
    assert "timeline" not in doc["request"]
    names = [p["name"] for p in doc["phases"]]
    assert names[:3] == ["receive", "tokenize", "queue"] and sum(p["kind"] == "decode" for p in doc["phases"]) == 30
    assert round(doc["phases"][1]["duration_ms"], 2) == 3.0  # tokenized 1 ms -> 4 ms after arrival


def test_rejected_request_has_no_engine_path(ledger) -> None:
    ledger(make_row("rej", status="rejected", http_status=429, rejection_reason="queue_full", timeline=None))
    res = _cli("timeline", "rej")
    assert res.exit_code == 0, res.output
    assert "rejected: queue_full" in res.output and "no timeline recorded" in res.output


def test_real_engine_request_shows_its_prefill_chunks(ledger, tiny_model_dir: Path) -> None:
    """The row the gateway writes (row_from_engine_request) carries every chunk the engine ran."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.request import EngineRequest, SamplingParams
    from policies import load_policy

    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), threads=1,
                                    max_num_batched_tokens=16, kv_cache_num_blocks=32, scheduling="fcfs"))
    req = EngineRequest("real-1", list(range(300, 340)), SamplingParams(max_tokens=5, ignore_eos=True),
                        workload_class="realtime_risk")
    engine.add_request(req)
    while engine.has_unfinished():
        engine.step()
    ledger(row_from_engine_request(req, tenant="acme", class_rule="route", route="risk", slo=None,
                                   tokenize_start=req.arrival_time, tokenized=req.arrival_time))
    res = _cli("timeline", "real-1")
    assert res.exit_code == 0, res.output
    chunks = _step_lines(res.output, "prefill")
    assert [int(ln.split()[-2]) for ln in chunks] == [16, 16, 8]  # 40 prompt tokens, 16-token step budget
    assert len(_step_lines(res.output, "decode")) == 4  # 5 tokens: the first comes from the last prefill chunk
    assert "stop (length)" in res.output and "input 40 (0 from the prefix cache), output 5" in res.output
