"""The scheduler's postprocess owns a request's life after each step: tokens, stops, finish, blocks."""
from __future__ import annotations

from engine.request import RequestStatus
from tests.engine.sched_sim import EOS, Sim, make_scheduler


def test_tokens_are_appended_and_max_tokens_finishes_once_and_frees_blocks_at_once():
    sim = Sim(make_scheduler())
    r = sim.add("r", 6, "docs", max_tokens=3)
    while not r.is_finished:
        sim.step()
    assert r.output_token_ids == [1000, 1001, 1002] and r.status is RequestStatus.FINISHED_LENGTH
    assert r.finish_time == r.token_times[-1] and len(r.token_times) == 3 and r.first_token_time == r.token_times[0]
    assert sim.sched.stats().used_blocks == 0 and not sim.sched.has_unfinished()  # freed in the same step
    last = sim.results[-1].updates
    assert [(u.request.request_id, u.token_id, u.finished) for u in last] == [("r", 1002, True)]
    # a later finish (an abort racing the end) changes nothing
    assert sim.sched.finish_request("r", RequestStatus.FINISHED_ABORTED) is r
    assert r.status is RequestStatus.FINISHED_LENGTH and r.finish_time == r.token_times[-1]


def test_eos_stops_the_request_unless_ignore_eos():
    sim = Sim(make_scheduler())
    stopped = sim.add("s", 4, "docs", max_tokens=8)
    ignoring = sim.add("i", 4, "docs", max_tokens=4, ignore_eos=True)
    sim.scripted = {"s": [1000, EOS, 1002], "i": [1000, EOS, 1002]}
    sim.run()
    assert stopped.output_token_ids == [1000, EOS] and stopped.status is RequestStatus.FINISHED_STOPPED
    assert stopped.stop_reason == EOS
    assert ignoring.output_token_ids == [1000, EOS, 1002, 1003] and ignoring.status is RequestStatus.FINISHED_LENGTH


def test_stop_tokens_count_only_after_min_tokens():
    sim = Sim(make_scheduler())
    r = sim.add("r", 4, "docs", max_tokens=8, min_tokens=2, stop_token_ids=(77,))
    sim.scripted = {"r": [EOS, 77, 77, 1003]}
    sim.run()
    assert r.output_token_ids == [EOS, 77, 77] and r.stop_reason == 77
    assert r.status is RequestStatus.FINISHED_STOPPED


def test_a_seq_without_a_sampled_token_advances_but_gets_no_token():
    sim = Sim(make_scheduler())
    r = sim.add("r", 6, "docs", max_tokens=3)
    out = sim.sched.schedule()
    result = sim.sched.postprocess(out, {}, now=1.0)  # the engine failed this row's sampling
    assert result.updates == [] and r.num_computed_tokens == 6 and r.output_token_ids == []
    assert r.status is RequestStatus.RUNNING


def test_batch_order_puts_prefill_chunks_before_one_token_seqs():
    sim = Sim(make_scheduler(num_blocks=64, max_num_batched_tokens=32))
    a = sim.add("a", 4, "batch", max_tokens=8)
    sim.step()  # a decodes from now on
    sim.add("b", 12, "batch", max_tokens=2)
    sim.add("c", 9, "docs", max_tokens=2)
    out = sim.step()
    assert [s.num_new_tokens > 1 for s in out.seqs] == [True, True, False] and out.seqs[-1].request is a
    assert out.num_batched_tokens == sum(s.num_new_tokens for s in out.seqs) == 22
