"""Chunk costs and the chunk shield: a step's lower-class prefill is bounded in cost, not only in tokens, so
a realtime request arriving during a long document's prefill waits behind one short step (issue 23 finding 4)."""
from __future__ import annotations

import math

from engine.sched.prefill_cost import attention_tokens, chunk_cost, tokens_within
from tests.engine.sched_sim import BATCH, DOCS, URGENT, Sim, make_policy, make_scheduler, scheduled, variant

A = 32.0  # a toy model whose attention equals its linear layers at 32 tokens of context


def test_attention_tokens_of_smollm2():
    assert attention_tokens(hidden_size=576, intermediate_size=1536, num_heads=9, num_kv_heads=3, head_dim=64) == 3072


def test_tokens_within_is_the_largest_chunk_within_the_cost():
    for start in (0, 5, 100, 5000):
        for cost in (1, 7.5, 64, 300):
            n = tokens_within(start, cost, A)
            assert chunk_cost(start, n, A) <= cost + 1e-9 and chunk_cost(start, n + 1, A) > cost
    assert tokens_within(100, 0, A) == 0
    assert tokens_within(5000, 64, math.inf) == 64 and chunk_cost(5000, 64, math.inf) == 64  # unknown model: tokens


def _doc_chunks(shield: int) -> list[int]:
    urgent = variant(URGENT, shield_chunk_tokens=shield)
    sched = make_scheduler(make_policy(urgent, variant(DOCS, max_input_tokens=400), BATCH), num_blocks=256,
                           attention_tokens=A)
    sim = Sim(sched)
    d = sim.add("d", 300, "docs", max_tokens=1)
    chunks = []
    while d.num_computed_tokens < 300 and not d.output_token_ids:
        chunks.append(scheduled(sim.step())["d"])
    return chunks


def test_the_chunk_shield_shrinks_chunks_as_the_context_grows():
    chunks = _doc_chunks(8)
    start = 0
    for n in chunks:
        # every step stays as short as 8 tokens at zero context; where one token costs more, one still goes
        assert chunk_cost(start, n, A) <= 8 + 1e-9 or n == 1
        start += n
    assert chunks[0] == tokens_within(0, 8, A) and chunks[0] > chunks[-1] == 1 and sum(chunks) == 300


def test_without_the_chunk_shield_chunks_fill_the_step():
    chunks = _doc_chunks(-1)
    assert chunks[:-1] == [16] * (len(chunks) - 1)  # the 16-token step budget, whatever the context


def test_a_request_arriving_mid_document_runs_in_the_next_step():
    urgent = variant(URGENT, shield_chunk_tokens=8)
    sim = Sim(make_scheduler(make_policy(urgent, variant(DOCS, max_input_tokens=400), BATCH), num_blocks=256,
                             attention_tokens=A))
    d = sim.add("d", 300, "docs", max_tokens=1)
    for _ in range(10):
        sim.step()
    sim.add("u", list(range(500, 508)), "urgent", max_tokens=2)
    start = d.num_computed_tokens
    out = scheduled(sim.step())
    assert out["u"] == 8  # the whole event, the step after it arrived ...
    assert chunk_cost(start, out.get("d", 0), A) <= 8  # ... beside at most a shielded sliver of the document


def test_the_chunk_shield_holds_only_while_its_class_is_active():
    urgent = variant(URGENT, shield_chunk_tokens=8, shield_active_s=5.0)
    sched = make_scheduler(make_policy(urgent, variant(DOCS, max_input_tokens=400), BATCH), num_blocks=256,
                           attention_tokens=A)
    now = [0.0]
    sched.clock = lambda: now[0]  # the step's "now", on the simulation's arrival-time scale
    sim = Sim(sched)
    d = sim.add("d", 300, "docs", max_tokens=1)
    assert scheduled(sim.step())["d"] == 16  # no urgent request has ever arrived: the full step budget
    u = sim.add("u", list(range(500, 508)), "urgent", max_tokens=1)
    now[0] = u.arrival_time
    assert scheduled(sim.step())["u"] == 8  # the event's own step
    assert chunk_cost(d.num_computed_tokens, scheduled(sim.step())["d"], A) <= 8  # active: shielded
    now[0] = u.arrival_time + 5.0
    assert chunk_cost(d.num_computed_tokens, scheduled(sim.step())["d"], A) <= 8  # still within 5 s
    now[0] = u.arrival_time + 5.5
    assert scheduled(sim.step())["d"] == 16  # quiet for longer than shield_active_s: full chunks again
