"""A request's path (arrival -> tokenize -> queue -> prefill chunks -> decode steps -> stop) from its ledger row."""
from __future__ import annotations

import pytest

from ledger.reports import render_timeline_html, timeline_phases
from tests.ledger.factories import make_row

T = 1_700_000_000.0
TIMELINE = {
    "arrival": T, "tokenize_start": T + 0.001, "tokenized": T + 0.003, "first_scheduled": T + 0.010,
    "first_token": T + 0.050, "finished": T + 0.101,
    "steps": [
        {"kind": "prefill", "start": T + 0.010, "end": T + 0.030, "num_tokens": 64, "batch_tokens": 80},
        {"kind": "prefill", "start": T + 0.030, "end": T + 0.050, "num_tokens": 36, "batch_tokens": 40},
        {"kind": "decode", "start": T + 0.050, "end": T + 0.060, "num_tokens": 1, "batch_tokens": 3},
        {"kind": "decode", "start": T + 0.080, "end": T + 0.100, "num_tokens": 1, "batch_tokens": 2},
    ],
}


def test_phases_in_order_with_durations():
    phases = timeline_phases(make_row("r1", timeline=TIMELINE, finish_reason="length"))
    assert [p.name for p in phases] == ["receive", "tokenize", "queue", "prefill chunk 1", "prefill chunk 2",
                                        "decode step 1", "waiting (not scheduled)", "decode step 2", "stop (length)"]
    got = {p.name: (round(p.start_ms, 3), round(p.duration_ms, 3)) for p in phases}
    assert got["tokenize"] == (1.0, 2.0)
    assert got["queue"] == (3.0, 7.0)
    assert got["prefill chunk 2"] == (30.0, 20.0)
    assert got["waiting (not scheduled)"] == (60.0, 20.0)  # e.g. preempted between two decode steps
    assert got["stop (length)"] == (100.0, 1.0)
    assert [(p.num_tokens, p.batch_tokens) for p in phases if p.kind == "prefill"] == [(64, 80), (36, 40)]


def test_html_shows_chart_and_steps():
    html = render_timeline_html(make_row("req-42", timeline=TIMELINE))
    assert "<svg" in html and "req-42" in html and "prefill chunk 2" in html and "decode step 2" in html


@pytest.mark.parametrize("timeline", [None, {}])
def test_rejected_request_without_timeline(timeline):
    row = make_row("rej", status="rejected", timeline=timeline)
    assert timeline_phases(row) == []
    assert "No timeline recorded" in render_timeline_html(row)


def test_the_text_timeline_names_key_replica_versions_and_chain_position():
    from finserve.commands.timeline import render_text

    row = make_row("r-placed", key_id="key123", replica="http://10.0.0.7:8001", replica_reason="affinity",
                   model_id="SmolLM2", weights_sha256="ab" * 32, weight_format="int8", policy_sha256="cd" * 32,
                   finserve_version="0.1.0", chain_seq=42, row_hash="ef" * 32).to_dict()
    text = render_text(row)
    assert "key key123" in text and "engine replica http://10.0.0.7:8001 (affinity)" in text
    assert "served by SmolLM2 (weights abababababab, int8), policy cdcdcdcdcdcd, finserve 0.1.0" in text
    assert "ledger chain: acme #42" in text
