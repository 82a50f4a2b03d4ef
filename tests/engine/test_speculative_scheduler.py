"""Speculative decoding in the scheduler and the KV cache alone (fake model, no torch): a draft is scheduled as
part of its request's decode chunk under the token budget, accepted tokens are taken in order with every stop
rule, and the blocks that held rejected positions go back to the pool, never into the prefix cache."""
from __future__ import annotations

from engine.outputs import SchedulerOutput
from engine.request import EngineRequest, RequestStatus
from engine.speculative.draft import Draft
from tests.engine.sched_sim import DOCS, EOS, Sim, check_block_accounting, make_policy, make_scheduler, variant


def _decoding(sim: Sim, rid: str = "d", prompt: int = 6, cls: str = "docs", **kw: object) -> EngineRequest:
    req = sim.add(rid, prompt, cls, **kw)
    sim.step()  # prefill; samples 1000
    assert req.in_decode and req.output_token_ids == [1000]
    return req


def _verify(sim: Sim, out: SchedulerOutput, token: int, accepted: int) -> None:
    """The model's side of a step: every seq with a draft accepted `accepted` of it, then sampled `token`."""
    sampled = {s.request.request_id: token for s in out.seqs if s.samples}
    sim.sched.postprocess(out, sampled, now=float(next(sim.clock)), accepted=dict.fromkeys(sampled, accepted))
    check_block_accounting(sim.sched)


def _registered_tokens(sim: Sim) -> list[tuple[int, ...]]:
    return [b.token_ids for b in sim.sched.kv.pool.blocks if b.block_hash is not None]


def test_a_draft_is_verified_as_one_decode_chunk_counted_in_the_budget() -> None:
    sim = Sim(make_scheduler())
    req = _decoding(sim, max_tokens=20)
    req.draft = Draft.of([50, 51, 52, 53])
    out = sim.sched.schedule()
    (seq,) = out.seqs
    assert seq.num_new_tokens == 5 and seq.draft.token_ids == (50, 51, 52, 53)
    assert seq.samples and not seq.is_prefill and out.num_batched_tokens == 5
    _verify(sim, out, 60, accepted=2)
    assert req.output_token_ids == [1000, 50, 51, 60]
    assert req.num_computed_tokens == 6 + 3  # the sampled token and the two accepted: 60 is computed next step
    assert (req.num_draft_tokens, req.num_accepted_tokens) == (4, 2)


def test_the_budget_cuts_a_draft_and_a_full_pool_drops_it_rather_than_preempt() -> None:
    sim = Sim(make_scheduler(max_num_batched_tokens=4))
    req = _decoding(sim, prompt=4, max_tokens=20)
    req.draft = Draft.of([50, 51, 52, 53, 54, 55])
    (seq,) = sim.sched.schedule().seqs
    assert seq.num_new_tokens == 4 and len(seq.draft) == 3  # 1 + 3 drafted tokens fill the 4-token step

    one_class = make_policy(variant(DOCS, kv_min_share=0.0, kv_max_share=1.0))
    sim = Sim(make_scheduler(one_class, num_blocks=4))  # 16 slots: the decodes fit, the draft's blocks do not
    req = _decoding(sim, prompt=7, max_tokens=4)
    other = sim.add("o", 3, "docs", max_tokens=4)
    sim.step()
    req.draft = Draft.of([50, 51, 52, 53, 54, 55])
    out = sim.sched.schedule()
    assert {s.request.request_id: len(s.draft) for s in out.seqs} == {"d": 0, "o": 0}
    assert other.status is RequestStatus.RUNNING and not out.preempted_ids


def test_rejected_positions_give_their_blocks_back_and_never_reach_the_prefix_cache() -> None:
    sim = Sim(make_scheduler())  # block size 4
    req = _decoding(sim, prompt=6, max_tokens=30)  # 7 tokens: 2 blocks
    req.draft = Draft.of([50, 51, 52, 53, 54, 55, 56, 57])
    out = sim.sched.schedule()
    assert len(out.seqs[0].block_ids) == 4  # positions 6..14 written: blocks 0-3
    _verify(sim, out, 60, accepted=1)
    assert req.output_token_ids == [1000, 50, 60] and req.num_computed_tokens == 8
    assert len(sim.sched.kv.block_table("d")) == 3  # 9 tokens: the block of rejected positions alone went back
    # only full blocks of accepted tokens are registered: none holds a rejected draft token
    assert _registered_tokens(sim) == [(1, 2, 3, 4), (5, 6, 1000, 50)]
    for _ in range(4):  # later steps overwrite the rejected K/V left in the last block before it registers
        req.draft = Draft.of([70, 71])
        _verify(sim, sim.sched.schedule(), 80, accepted=0)
    tokens = req.all_token_ids
    assert _registered_tokens(sim) == [tuple(tokens[i:i + 4]) for i in range(0, 12, 4)]
    assert not {50 + i for i in range(1, 8)} & {t for b in _registered_tokens(sim) for t in b}


def test_a_stop_token_inside_the_accepted_run_ends_the_request_there() -> None:
    sim = Sim(make_scheduler())
    req = _decoding(sim, max_tokens=20)
    req.draft = Draft.of([50, EOS, 52, 53])
    out = sim.sched.schedule()
    sampled = {"d": 60}
    result = sim.sched.postprocess(out, sampled, now=99.0, accepted={"d": 4})
    assert req.output_token_ids == [1000, 50, EOS] and req.status is RequestStatus.FINISHED_STOPPED
    assert req.stop_reason == EOS
    (update,) = result.updates
    assert update.finished and update.token_id == EOS and update.draft.token_ids == (50,)
    assert update.groups() == [[50], [EOS]]
    assert sim.sched.kv.block_table("d") == []
    check_block_accounting(sim.sched)


def test_max_tokens_inside_the_accepted_run_ends_it_at_the_limit() -> None:
    sim = Sim(make_scheduler())
    req = _decoding(sim, max_tokens=3)
    req.draft = Draft.of([50, 51, 52])
    _verify(sim, sim.sched.schedule(), 60, accepted=3)
    assert req.output_token_ids == [1000, 50, 51] and req.status is RequestStatus.FINISHED_LENGTH


def test_forced_tokens_inside_a_draft_count_as_accepted_and_leave_nothing_pending() -> None:
    sim = Sim(make_scheduler())
    req = _decoding(sim, max_tokens=20)
    req.draft = Draft.of([50, 7, 8, 51], [False, True, True, False])
    out = sim.sched.schedule()
    sampled = {"d": 60}
    (update,) = sim.sched.postprocess(out, sampled, now=99.0, accepted={"d": 4}).updates
    assert req.output_token_ids == [1000, 50, 7, 8, 51, 60]
    assert req.num_forced_tokens == 2 and req.num_forced_pending == 0 and req.in_decode
    assert req.num_computed_tokens == req.num_tokens - 1
    assert update.groups() == [[50, 7, 8], [51], [60]]


def test_a_cut_after_finishing_keeps_the_tokens_before_a_stop_string() -> None:
    sim = Sim(make_scheduler())
    req = _decoding(sim, max_tokens=3)
    req.draft = Draft.of([50, 51])
    _verify(sim, sim.sched.schedule(), 60, accepted=2)
    assert req.status is RequestStatus.FINISHED_LENGTH and req.output_token_ids == [1000, 50, 51]
    # the engine found a stop string ending at token 50: the run's tail is dropped, the reason is the string's
    sim.sched.finish_request("d", RequestStatus.FINISHED_STOPPED, num_output_tokens=2)
    assert req.output_token_ids == [1000, 50] and len(req.token_times) == 2
    assert req.status is RequestStatus.FINISHED_STOPPED
    sim.sched.finish_request("d", RequestStatus.FINISHED_ABORTED)  # without a cut, the first finish still wins
    assert req.status is RequestStatus.FINISHED_STOPPED


def test_a_draft_is_only_used_by_a_request_in_decode() -> None:
    sim = Sim(make_scheduler(max_num_batched_tokens=4))
    req = sim.add("d", 10, "docs", max_tokens=20)
    req.draft = Draft.of([50, 51])  # a stale draft on a request still prefilling
    out = sim.sched.schedule()
    assert out.seqs[0].num_new_tokens == 4 and not out.seqs[0].draft
