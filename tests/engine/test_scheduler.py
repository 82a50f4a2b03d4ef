"""Scheduler behaviour on synthetic requests and a fake block pool (no torch, no model)."""
from __future__ import annotations

import random

import pytest

from engine.outputs import AdmissionError
from engine.request import EngineRequest, RequestStatus, SamplingParams
from tests.engine.sched_sim import BATCH, DOCS, URGENT, Sim, make_policy, make_scheduler, scheduled, variant


def first_step(sim: Sim, rid: str) -> int:
    return next(i for i, out in enumerate(sim.steps) if rid in scheduled(out))


# ---- batching and ordering ------------------------------------------------------------------
def test_waiting_requests_start_by_class_priority_then_arrival():
    sim = Sim(make_scheduler(max_num_seqs=1))
    for rid, cls in [("b1", "batch"), ("d1", "docs"), ("u1", "urgent"), ("u2", "urgent"), ("b2", "batch")]:
        sim.add(rid, 4, cls, max_tokens=1)
    sim.run()
    order = sorted(["b1", "d1", "u1", "u2", "b2"], key=lambda rid: first_step(sim, rid))
    assert order == ["u1", "u2", "d1", "b1", "b2"]


def test_long_prompt_is_chunked_while_running_decodes_keep_going():
    sim = Sim(make_scheduler())
    b = sim.add("b", 4, "batch", max_tokens=8)
    sim.step()
    d = sim.add("d", 40, "docs", max_tokens=2)
    chunks = []
    while d.num_computed_tokens < 40:
        out = sim.step()
        assert scheduled(out)["b"] == 1  # the decode is never starved by the prefill
        assert out.seqs[0].request is d and out.seqs[-1].request is b  # prefills first, decodes last
        chunks.append(scheduled(out)["d"])
    assert chunks == [15, 15, 10] and len(d.output_token_ids) == 1 and len(b.output_token_ids) == 4


def test_urgent_request_arriving_during_a_long_prefill_runs_the_next_step():
    sim = Sim(make_scheduler(num_blocks=128))
    d = sim.add("d", 200, "docs", max_tokens=2)
    sim.step(), sim.step()
    assert d.num_computed_tokens == 32
    sim.add("u", list(range(500, 508)), "urgent", max_tokens=2)
    out = scheduled(sim.step())
    assert out["u"] == 8  # the whole event prompt, one step after arrival
    assert out["d"] >= 4  # the document keeps its reserved share and keeps moving
    out = scheduled(sim.step())
    assert out == {"u": 1, "d": 15}  # a reserve is never larger than what the class can use


def test_lower_class_keeps_its_reserved_token_share_under_higher_class_load():
    sim = Sim(make_scheduler())
    for i in range(4):
        sim.add(f"u{i}", 60, "urgent", max_tokens=1)
    sim.add("d", 60, "docs", max_tokens=1)
    for _ in range(3):
        out = scheduled(sim.step())
        assert out["d"] == 4  # docs' 25% of the 16-token step
        assert sum(n for rid, n in out.items() if rid != "d") == 12


def test_reserved_share_beats_lower_class_decodes():
    batch = variant(BATCH, max_running=20)
    sim = Sim(make_scheduler(make_policy(URGENT, DOCS, batch), num_blocks=256, max_num_seqs=20))
    for i in range(16):
        sim.add(f"b{i}", 4, "batch", max_tokens=30)
    while len(sim.sched.running) < 16 or any(r.num_computed_tokens < 4 for r in sim.sched.running.values()):
        sim.step()
    assert sim.steps[-1].num_batched_tokens == 16  # 16 decodes fill the step
    sim.add("u", 8, "urgent", max_tokens=2)
    out = scheduled(sim.step())
    assert out["u"] >= 4 and sum(n for rid, n in out.items() if rid != "u") <= 12


# ---- KV budgets -----------------------------------------------------------------------------
def test_class_never_grows_past_its_max_share_and_others_keep_running():
    docs = variant(DOCS, kv_min_share=0.0, kv_max_share=0.25)  # 8 of 32 blocks
    sim = Sim(make_scheduler(make_policy(URGENT, docs, BATCH)))
    for i in range(3):
        sim.add(f"d{i}", list(range(100 * i, 100 * i + 20)), "docs", max_tokens=8)  # distinct documents
    sim.add("b", 20, "batch", max_tokens=8)
    held, concurrent_docs = [], []
    while sim.sched.has_unfinished():
        sim.step()
        held.append(sim.sched.kv.budget.held("docs"))
        concurrent_docs.append(sum(r.workload_class == "docs" for r in sim.sched.running.values()))
    assert max(held) <= 8
    # A second document (5 blocks) never fits beside the first (up to 7) under the cap, though
    # the pool has room: a document starts only when its whole prompt fits under the cap.
    assert max(concurrent_docs) == 1
    assert sim.sched.stats().per_class["docs"].preemptions == 0
    assert sim.sched.get_request("b").status is RequestStatus.FINISHED_LENGTH


def fill_pool_with_batch(sim: Sim, n: int = 8) -> None:
    for i in range(n):
        sim.add(f"b{i}", 15, "batch", max_tokens=16)
    while sim.sched.kv.pool.num_available > 1:
        sim.step()


def test_higher_class_takes_blocks_from_preemptible_lower_class():
    sim = Sim(make_scheduler())
    fill_pool_with_batch(sim)
    u = sim.add("u", 30, "urgent", max_tokens=16)
    out = sim.step()
    assert scheduled(out)["u"] >= 4  # started at once, with at least its reserved share of the step
    assert out.preempted_ids and all(rid.startswith("b") for rid in out.preempted_ids)
    sim.run()
    assert u.status is RequestStatus.FINISHED_LENGTH
    batch = [sim.sched.get_request(f"b{i}") for i in range(8)]
    assert all(len(r.output_token_ids) == 16 for r in batch)
    assert sum(r.num_preemptions for r in batch) == sim.sched.stats().per_class["batch"].preemptions > 0


def test_class_under_its_guaranteed_share_takes_it_back_from_a_higher_class():
    high = variant(BATCH, name="high", priority=300, max_input_tokens=64)  # preemptible, no guarantee
    low = variant(BATCH, name="low", priority=100, kv_min_share=0.5)
    sim = Sim(make_scheduler(make_policy(high, low, default="high"), num_blocks=16, max_num_batched_tokens=64))
    for i in range(4):  # 4 blocks each for their whole life: the pool is full, nobody needs more
        sim.add(f"h{i}", list(range(100 * i, 100 * i + 13)), "high", max_tokens=4)
    sim.step()
    assert sim.sched.kv.pool.num_available == 0
    lo = sim.add("lo", 12, "low", max_tokens=6)
    out = sim.step()
    assert "lo" in scheduled(out) and out.preempted_ids
    sim.run()
    assert lo.num_preemptions == 0  # the preempted high requests cannot push it back below its share


def test_higher_class_never_waits_behind_lower_for_blocks():
    docs = variant(DOCS, kv_min_share=0.0, kv_max_share=1.0, max_running=8)
    urgent = variant(URGENT, kv_min_share=0.0)
    sim = Sim(make_scheduler(make_policy(urgent, docs, BATCH), num_blocks=17, max_num_batched_tokens=64))
    for i in range(4):  # non-preemptible, 4 blocks each for their whole life: 1 block stays free
        sim.add(f"d{i}", list(range(100 * i, 100 * i + 13)), "docs", max_tokens=3)
    sim.step()
    assert sim.sched.kv.pool.num_available == 1
    sim.add("u", list(range(900, 912)), "urgent", max_tokens=2)  # needs 3 blocks
    sim.add("b", 4, "batch", max_tokens=2)  # needs 1: it would fit now, but must not go first
    sim.run()
    assert first_step(sim, "u") <= first_step(sim, "b")


# ---- preemption ---------------------------------------------------------------------------
def test_preempted_request_keeps_its_tokens_and_resumes_by_recompute():
    sim = Sim(make_scheduler(num_blocks=6))
    b1 = sim.add("b1", 8, "batch", max_tokens=12)
    b2 = sim.add("b2", 8, "batch", max_tokens=12)
    while not b2.num_preemptions:
        out = sim.step()
    assert out.preempted_ids == ["b2"] and b1.num_preemptions == 0  # the newest goes
    kept = list(b2.output_token_ids)
    assert kept and b2.status is RequestStatus.PREEMPTED and b2.num_computed_tokens == 0
    while "b2" not in scheduled(out := sim.step()):
        pass
    assert b2.output_token_ids[: len(kept)] == kept
    assert out.seqs[0].start_pos == 0 and scheduled(out)["b2"] > 1  # recompute prompt + output
    sim.run()
    assert b2.output_token_ids == [1000 + i for i in range(12)]
    assert b2.status is RequestStatus.FINISHED_LENGTH


def test_waiting_higher_class_preempts_newest_lower_request_for_a_slot():
    sim = Sim(make_scheduler(max_num_seqs=2))
    b1, b2 = sim.add("b1", 4, "batch", max_tokens=20), sim.add("b2", 4, "batch", max_tokens=20)
    sim.step(), sim.step()
    sim.add("u", 4, "urgent", max_tokens=2)
    out = sim.step()
    assert "u" in scheduled(out) and out.preempted_ids == ["b2"]
    assert b1.status is RequestStatus.RUNNING and b2.status is RequestStatus.PREEMPTED
    sim.run()
    assert len(b2.output_token_ids) == 20 and b2.num_preemptions == 1


def test_non_preemptible_class_is_not_preempted_for_a_slot():
    sim = Sim(make_scheduler(max_num_seqs=1))
    d = sim.add("d", 4, "docs", max_tokens=5)
    sim.step()
    sim.add("u", 4, "urgent", max_tokens=1)
    sim.run()
    assert d.num_preemptions == 0 and first_step(sim, "u") == 5


# ---- starvation ---------------------------------------------------------------------------
def run_urgent_flood(starvation_steps: int, steps: int) -> Sim:
    urgent = variant(URGENT, max_running=2, queue_limit=8)
    sim = Sim(make_scheduler(make_policy(urgent, DOCS, BATCH), max_num_seqs=2, starvation_steps=starvation_steps))
    sim.add("b", 4, "batch", max_tokens=2)
    for i in range(steps):
        while sim.sched.waiting.count("urgent") < 2:
            sim.add(f"u{i}-{sim.sched.waiting.count('urgent')}", 4, "urgent", max_tokens=4)
        sim.step()
    return sim


def test_lowest_class_is_not_starved_by_a_continuous_flood():
    sim = run_urgent_flood(starvation_steps=8, steps=30)
    b = sim.sched.get_request("b")
    assert b.status is RequestStatus.FINISHED_LENGTH
    assert first_step(sim, "b") <= 8 + 5  # promoted after 8 steps, then one urgent request's drain time


def test_without_the_guarantee_the_flood_starves_the_lowest_class():
    sim = run_urgent_flood(starvation_steps=0, steps=30)
    assert sim.sched.get_request("b").first_scheduled_time is None


# ---- admission --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cls", "prompt", "max_tokens", "reason"),
    [
        ("urgent", 65, 4, "prompt_too_long"),
        ("urgent", 8, 17, "max_tokens_too_large"),
        ("docs", 250, 30, "context_overflow"),  # max_model_len 256 below
        ("urgent", 60, 10, "exceeds_kv_budget"),  # 69 - 1 tokens = 17 blocks > urgent's 16
        ("no_such_class", 8, 4, "unknown_workload_class"),
        ("", 8, 4, "unknown_workload_class"),  # the engine never picks a class: the caller classifies
    ],
)
def test_requests_that_can_never_fit_are_refused_at_once(cls, prompt, max_tokens, reason):
    sim = Sim(make_scheduler(max_model_len=256))
    with pytest.raises(AdmissionError) as exc:
        sim.add("r", prompt, cls, max_tokens=max_tokens)
    assert exc.value.reason == reason and not exc.value.retryable
    counted = "docs" if reason == "unknown_workload_class" else cls  # the default class
    assert sim.sched.stats().per_class[counted].rejections == {reason: 1}
    assert not sim.sched.has_unfinished()


def test_full_class_queue_is_refused_with_a_retry_hint_and_other_classes_still_queue():
    sim = Sim(make_scheduler())
    for i in range(4):  # urgent runs 4 at once: these take its free slots, they do not queue
        sim.add(f"s{i}", 4, "urgent")
    for i in range(4):
        sim.add(f"u{i}", 4, "urgent")
    with pytest.raises(AdmissionError) as exc:
        sim.add("u4", 4, "urgent")
    assert exc.value.reason == "queue_full" and exc.value.retryable and exc.value.retry_after_s >= 1.0
    sim.add("d", 4, "docs")
    with pytest.raises(AdmissionError) as dup:
        sim.add("d", 4, "docs")
    assert dup.value.reason == "duplicate_request_id"
    stats = sim.sched.stats()
    assert stats.per_class["urgent"].rejections == {"queue_full": 1} and stats.per_class["urgent"].waiting == 8


def test_the_queue_limit_counts_only_what_waits_beyond_the_free_batch_slots():
    sim = Sim(make_scheduler())
    for i in range(8):  # 4 free slots + queue_limit 4
        sim.add(f"u{i}", 4, "urgent", max_tokens=8)
    with pytest.raises(AdmissionError):
        sim.add("u8", 4, "urgent")
    sim.step()  # the 4 slots fill: the 4 others wait for capacity, so the queue is at its limit
    assert len(sim.sched.running) == 4
    with pytest.raises(AdmissionError) as exc:
        sim.add("u8", 4, "urgent")
    assert exc.value.reason == "queue_full"


# ---- prefix caching -----------------------------------------------------------------------
def test_second_question_on_a_document_reuses_its_blocks_only_for_the_same_tenant():
    sim = Sim(make_scheduler(num_blocks=64))
    doc = list(range(100, 132))  # 8 full blocks
    sim.add("q1", doc + [1, 2, 3], "docs", salt="A")
    sim.run()
    q2 = sim.add("q2", doc + [7, 8], "docs", salt="A")
    out = scheduled(sim.step())
    assert q2.num_cached_tokens == 32 and out["q2"] == 2  # only the question is prefilled
    q3 = sim.add("q3", doc + [7, 8], "docs", salt="B")
    b = sim.add("b", doc + [7, 8], "batch", salt="A")  # batch's policy turns prefix caching off
    sim.run()
    assert q3.num_cached_tokens == 0 and b.num_cached_tokens == 0
    stats = sim.sched.stats()
    assert stats.prefix_cache_hit_tokens == 32 and stats.prefix_cache_query_tokens == 35 + 34 + 34
    assert stats.cached_blocks > 0 and stats.used_blocks == 0


def test_prefix_caching_switched_off_in_config():
    sim = Sim(make_scheduler(enable_prefix_caching=False))
    sim.add("q1", 20, "docs")
    sim.run()
    q2 = sim.add("q2", 20, "docs")
    sim.run()
    assert q2.num_cached_tokens == 0 and sim.sched.stats().cached_blocks == 0


# ---- fcfs baseline ------------------------------------------------------------------------
def test_fcfs_serves_in_arrival_order_and_never_preempts_for_a_class():
    sim = Sim(make_scheduler(scheduling="fcfs", max_num_seqs=2))
    sim.add("b1", 4, "batch", max_tokens=6)
    sim.add("d1", 4, "docs", max_tokens=6)
    sim.add("u1", 4, "urgent", max_tokens=1)
    sim.run()
    assert first_step(sim, "u1") > first_step(sim, "d1") >= first_step(sim, "b1")
    assert first_step(sim, "u1") == 6  # waited for a slot instead of preempting
    assert all(not out.preempted_ids for out in sim.steps)


# ---- finish / abort -----------------------------------------------------------------------
def test_finish_request_in_any_state_frees_blocks_and_is_idempotent():
    sim = Sim(make_scheduler(num_blocks=6))
    running, preempted = sim.add("r", 8, "batch", max_tokens=12), sim.add("p", 8, "batch", max_tokens=12)
    while not preempted.num_preemptions:
        sim.step()
    waiting = sim.add("w", 4, "docs")
    for req in (running, preempted, waiting):
        assert sim.sched.finish_request(req.request_id, RequestStatus.FINISHED_ABORTED) is req
        assert req.status is RequestStatus.FINISHED_ABORTED and req.finish_time is not None
    t = running.finish_time
    assert sim.sched.finish_request("r", RequestStatus.FINISHED_STOPPED) is running and running.finish_time == t
    assert running.status is RequestStatus.FINISHED_ABORTED
    assert sim.sched.finish_request("never-seen", RequestStatus.FINISHED_ABORTED) is None
    assert not sim.sched.has_unfinished() and sim.sched.stats().used_blocks == 0


def test_abort_between_schedule_and_update_is_safe():
    sim = Sim(make_scheduler())
    sim.add("a", 8, "docs")
    out = sim.sched.schedule()
    sim.sched.finish_request("a", RequestStatus.FINISHED_ABORTED)
    result = sim.sched.postprocess(out, {"a": 1000}, now=1.0)
    assert result.updates == [] and sim.sched.get_request("a").output_token_ids == []
    assert sim.sched.stats().used_blocks == 0


def test_random_mix_of_finish_abort_and_preemption_never_leaks_blocks():
    rng = random.Random(1234)
    sim = Sim(make_scheduler(num_blocks=24, max_num_seqs=6, starvation_steps=20))
    docs = [list(range(100 + 50 * d, 124 + 50 * d)) for d in range(2)]
    n = 0
    for _ in range(400):
        if rng.random() < 0.5:
            cls = rng.choice(["urgent", "docs", "batch"])
            prompt = rng.choice(docs) + [rng.randrange(1, 99)] if cls != "urgent" else rng.randrange(2, 30)
            try:
                sim.add(f"r{n}", prompt, cls, max_tokens=rng.randrange(1, 12), salt=rng.choice("AB"))
            except AdmissionError as e:
                assert e.reason == "queue_full"
            n += 1
        live = list(sim.sched.running) + [r.request_id for r in sim.sched.waiting]
        if live and rng.random() < 0.1:
            sim.sched.finish_request(rng.choice(live), RequestStatus.FINISHED_ABORTED)
        sim.step()  # checks the block accounting invariants
    sim.run()
    stats = sim.sched.stats()
    assert stats.used_blocks == 0 and stats.free_blocks + stats.cached_blocks == 24
    assert sum(c.preemptions for c in stats.per_class.values()) > 0 and stats.prefix_cache_hit_tokens > 0


def _step(sched) -> dict[str, int]:
    """One engine step: schedule, compute, sample token 7 for every seq that samples."""
    out = sched.schedule()
    sched.postprocess(out, {s.request.request_id: 7 for s in out.seqs if s.samples}, now=1.0)
    return {s.request.request_id: s.num_new_tokens for s in out.seqs}


def test_prefill_isolation_pauses_lower_prefill_but_not_decodes():
    urgent = variant(URGENT, prefill_isolation=True)
    sched = make_scheduler(make_policy(urgent, DOCS, BATCH), num_blocks=64, max_num_batched_tokens=32)
    sched.add_request(EngineRequest("b1", list(range(4)), SamplingParams(max_tokens=8), "batch"))
    _step(sched)  # b1 prefilled; it decodes from now on
    sched.add_request(EngineRequest("d1", list(range(100, 160)), SamplingParams(max_tokens=4), "docs"))
    assert _step(sched)["d1"] > 1  # the document prefills in chunks
    sched.add_request(EngineRequest("u1", list(range(200, 212)), SamplingParams(max_tokens=4), "urgent"))
    isolated = _step(sched)
    assert isolated["u1"] == 12
    assert isolated["b1"] == 1  # decodes continue
    assert "d1" not in isolated  # the document's next chunk waits one step
    assert _step(sched)["d1"] > 1  # urgent only decodes now: the document prefills again


def test_shield_caps_lower_prefill_while_the_class_decodes():
    urgent = variant(URGENT, shield_prefill_tokens=5)
    sched = make_scheduler(make_policy(urgent, DOCS, BATCH), num_blocks=64, max_num_batched_tokens=32)
    sched.add_request(EngineRequest("u1", list(range(200, 208)), SamplingParams(max_tokens=6), "urgent"))
    _step(sched)  # u1 prefilled; it decodes from now on
    sched.add_request(EngineRequest("d1", list(range(100, 160)), SamplingParams(max_tokens=4), "docs"))
    shielded = _step(sched)
    assert shielded == {"u1": 1, "d1": 5}  # u1 runs: the document gets 5 prefill tokens, not 31
    assert _step(sched) == {"u1": 1, "d1": 5}
    sched.finish_request("u1", RequestStatus.FINISHED_LENGTH)
    assert _step(sched)["d1"] > 5  # u1 finished: the document takes the whole budget again
