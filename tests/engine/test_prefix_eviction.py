"""Evicting a prompt prefix (a deleted document; KVCacheManager.evict_prefix), through the real scheduler on a
fake pool: its leases end and its blocks, and those of the questions asked after it, are free at once; the
tenant's shared leading blocks, other prefixes and other tenants' copies stay; blocks a running request reads
are freed only when it finishes, and nothing of the prefix is cached after that.
"""
from __future__ import annotations

from engine.outputs import PrefixEviction
from engine.request import EngineRequest
from tests.engine.sched_sim import Sim, make_scheduler

BS = 4
NUM_BLOCKS = 64
HEAD = list(range(1, 9))  # 8 tokens (2 blocks) every document prompt of the tenant starts with
DOC_A = HEAD + list(range(100, 140))  # + 40 tokens: 12 blocks in all
DOC_B = HEAD + list(range(300, 340))
LEASE_S = 900.0


def ask(sim: Sim, rid: str, doc: list[int], question: int, *, salt: str = "acme", max_tokens: int = 4,
        run: bool = True) -> EngineRequest:
    req = sim.add(rid, doc + [question, question + 1, question + 2], "docs", salt=salt, max_tokens=max_tokens)
    req.lease_s = LEASE_S
    if run:
        sim.run()
    return req


def new_sim() -> Sim:
    return Sim(make_scheduler(num_blocks=NUM_BLOCKS))


def test_evicting_a_document_frees_its_leased_blocks_and_the_next_question_misses() -> None:
    sim = new_sim()
    kv = sim.sched.kv
    ask(sim, "q1", DOC_A, 1)
    ask(sim, "q2", DOC_A, 7)  # a second question: its own blocks continue the document's
    assert kv.stats().leased_blocks > 12 and kv.pool.num_free < NUM_BLOCKS - 12
    done = kv.evict_prefix(PrefixEviction(DOC_A, "acme"))
    assert done.held == 0 and done.freed == done.blocks and done.leases_ended == done.blocks > 12
    assert kv.stats().leased_blocks == 0 and kv.budget.held("docs") == 0
    assert kv.pool.num_free == NUM_BLOCKS and kv.pool.num_evictable == 0  # nothing of it is cached any more
    assert ask(sim, "q3", DOC_A, 1).num_cached_tokens == 0


def test_only_the_tenants_copy_goes_and_the_shared_head_and_other_documents_stay() -> None:
    sim = new_sim()
    ask(sim, "a", DOC_A, 1)
    ask(sim, "b", DOC_B, 1)
    ask(sim, "theirs", DOC_A, 1, salt="globex")  # another tenant, the same text: its own blocks
    done = sim.sched.kv.evict_prefix(PrefixEviction(DOC_A, "acme", keep_tokens=len(HEAD)))
    assert done.blocks >= 10
    assert ask(sim, "b2", DOC_B, 5).num_cached_tokens == len(DOC_B)  # the other document: all of it cached
    assert ask(sim, "theirs2", DOC_A, 5, salt="globex").num_cached_tokens == len(DOC_A)
    assert ask(sim, "a2", DOC_A, 5).num_cached_tokens == len(HEAD)  # only the shared instructions


def test_a_prefix_ending_inside_a_block_evicts_the_blocks_that_continue_it() -> None:
    sim = new_sim()
    short, other = HEAD + [500, 501], HEAD + [600, 601]  # 2 tokens past the head: no full block of their own
    ask(sim, "s", short, 1)
    ask(sim, "o", other, 1)
    done = sim.sched.kv.evict_prefix(PrefixEviction(short, "acme", keep_tokens=len(HEAD)))
    assert done.blocks >= 1 and done.leases_ended == done.blocks
    assert ask(sim, "s2", short, 1).num_cached_tokens == len(HEAD)  # its question's block is gone too
    assert ask(sim, "o2", other, 1).num_cached_tokens == len(other) + 2  # untouched (its question's block)


def test_blocks_a_running_request_reads_are_freed_when_it_finishes() -> None:
    sim = new_sim()
    kv = sim.sched.kv
    ask(sim, "q1", DOC_A, 1)
    running = ask(sim, "q2", DOC_A, 7, max_tokens=12, run=False)
    for _ in range(4):  # its prefill (from the cache) and a few decode steps
        sim.step()
    assert running.request_id in sim.sched.running and running.num_cached_tokens == len(DOC_A)
    table = kv.block_table(running.request_id)
    done = kv.evict_prefix(PrefixEviction(DOC_A, "acme"))
    assert done.held >= len(DOC_A) // BS and done.freed > 0  # the blocks it reads stay; q1's own go now
    assert kv.block_table(running.request_id) == table  # nothing taken from under it
    assert all(kv.pool.blocks[b].ref_cnt == 1 for b in table)
    sim.run()  # it finishes as if nothing happened
    assert len(running.output_token_ids) == 12
    assert kv.pool.num_free == NUM_BLOCKS and kv.stats().leased_blocks == 0  # freed, not leased, not cached
    assert ask(sim, "q3", DOC_A, 7).num_cached_tokens == 0
