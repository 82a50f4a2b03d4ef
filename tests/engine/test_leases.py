"""Document leases on KV blocks (engine/kv_cache/leases.py), driven through the real scheduler on a fake pool.

A question with `lease_s` keeps its document's blocks after it finishes: a burst of bulk work cannot
evict them, they count against the document class's KV share, the class takes its own leases back
(oldest first, deepest block first) when it needs the room, and an expired lease leaves ordinary
cached blocks that the next burst evicts.
"""
from __future__ import annotations

from engine.kv_cache import KVCacheManager
from engine.request import EngineRequest, SamplingParams
from tests.engine.sched_sim import Sim, make_scheduler

BS = 4
DOC_A = list(range(100, 140))  # 40 tokens: 10 blocks
DOC_B = list(range(300, 360))  # 60 tokens: 15 blocks
LEASE_S = 900.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sim_with_clock() -> tuple[Sim, FakeClock]:
    clock = FakeClock()
    sim = Sim(make_scheduler(num_blocks=32))  # docs: kv_max_share 0.75 = 24 blocks; batch: no caching
    sim.sched.kv.clock = clock
    return sim, clock


def ask(sim: Sim, rid: str, doc: list[int], question: int, *, lease_s: float = LEASE_S) -> EngineRequest:
    req = sim.add(rid, doc + [question, question + 1, question + 2], "docs", salt="acme")
    req.lease_s = lease_s
    sim.run()
    return req


def bulk_burst(sim: Sim, n: int = 6, prompt: int = 60, max_tokens: int = 20) -> None:
    """`n` distinct bulk prompts at once (bulk caches nothing: it only ever evicts)."""
    for i in range(n):
        sim.add(f"bulk-{id(sim)}-{i}", [5000 + 97 * i + t for t in range(prompt)], "batch", max_tokens=max_tokens)
    sim.run()


def test_a_leased_document_survives_a_bulk_burst_that_evicts_an_unleased_one() -> None:
    results = {}
    for lease_s in (LEASE_S, 0.0):
        sim, _ = sim_with_clock()
        ask(sim, "q1", DOC_A, 1, lease_s=lease_s)
        bulk_burst(sim)
        results[lease_s] = ask(sim, "q2", DOC_A, 7, lease_s=lease_s).num_cached_tokens
    assert results[LEASE_S] == len(DOC_A)  # the whole document came from the cache
    assert results[0.0] == 0  # the same burst evicts a document nobody leased


def test_an_expired_lease_leaves_ordinary_cached_blocks() -> None:
    sim, clock = sim_with_clock()
    ask(sim, "q1", DOC_A, 1)
    kv = sim.sched.kv
    leased = kv.leased_block_ids("docs")
    assert len(leased) == 11 and kv.stats().leased_blocks == 11  # the document's 10 blocks + the question's
    clock.now += LEASE_S + 1
    assert kv.leased_block_ids("docs") == [] and kv.stats().leased_blocks == 0
    assert kv.pool.num_evictable == 11 and kv.budget.held("docs") == 0  # still cached, no longer the class's
    bulk_burst(sim)
    assert ask(sim, "q2", DOC_A, 7).num_cached_tokens == 0  # evictable like any cached block


def test_leased_blocks_count_against_the_class_share_and_the_class_gives_up_its_oldest() -> None:
    sim, clock = sim_with_clock()
    kv = sim.sched.kv
    ask(sim, "a1", DOC_A, 1)
    assert kv.budget.held("docs") == 11 and not sim.sched.running  # nothing runs, the lease holds them
    assert kv.pool.num_available == 32 - 11
    clock.now += 10
    # Document B needs 17 blocks: with A's 11 leased that is over the class's 24. The class ends
    # A's lease from its tail (A's question block first), keeping A's head as a usable prefix.
    a_blocks = kv.leased_block_ids("docs")
    ask(sim, "b1", DOC_B, 1)
    assert kv.budget.held("docs") <= kv.budget.share("docs").max_blocks
    a_still = [b for b in a_blocks if b in kv.leased_block_ids("docs")]
    assert 0 < len(a_still) < len(a_blocks) and set(a_still) == set(a_blocks[-len(a_still):])  # give-up order: deepest first
    bulk_burst(sim, 8, prompt=20, max_tokens=4)  # evicts what is no longer leased
    assert ask(sim, "a2", DOC_A, 7).num_cached_tokens == len(a_still) * BS


def test_other_classes_cannot_take_leased_blocks_but_can_use_the_rest() -> None:
    sim, _ = sim_with_clock()
    ask(sim, "q1", DOC_A, 1)
    bulk_burst(sim, 2)  # 21 blocks each: runs in the 21 blocks the lease leaves
    assert all(r.is_finished for r in (sim.sched.get_request(f"bulk-{id(sim)}-{i}") for i in range(2)) if r)
    assert len(sim.sched.kv.leased_block_ids("docs")) == 11


def test_a_lease_ends_with_a_preemption_never() -> None:
    """Only a finished request leases: preemption keeps nothing beyond what the prefix cache keeps."""
    kv = KVCacheManager(8, BS)
    req = EngineRequest("r", list(range(1, 13)), SamplingParams(), workload_class="c", lease_s=LEASE_S)
    computed, n = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, req.num_tokens - n, computed) is not None
    req.num_computed_tokens = req.num_tokens
    kv.cache_full_blocks(req)
    kv.free(req, keep_hashes=True)
    assert kv.leased_block_ids("c") == [] and kv.pool.num_evictable == 3


def test_renewing_a_lease_moves_its_expiry_and_many_renewals_stay_bounded() -> None:
    from engine.kv_cache.leases import Lease, LeaseTable

    table = LeaseTable()
    for t in range(5000):  # one block renewed again and again, as every question on a document does
        table.grant(7, Lease("docs", until=100.0 + t, depth=0))
    assert table.expired(5000.0) == [] and table.get(7) == Lease("docs", until=5099.0, depth=0)
    assert table.expired(5099.0) == [7]
    assert len(table._expiry) < 2000  # stale entries were compacted away


def test_leased_blocks_go_last_to_a_request_that_cannot_run_beside_them() -> None:
    """Leases never stall the engine: a bulk request too large for the room the lease leaves, with nothing
    else running that could free blocks, takes the leased blocks (deepest first) rather than wait 15 min."""
    sim, _ = sim_with_clock()
    ask(sim, "q1", DOC_A, 1)  # 11 blocks leased, 21 available
    big = sim.add("bulk-big", [7000 + t for t in range(100)], "batch", max_tokens=4)  # 26 blocks
    sim.run()
    assert big.is_finished and len(big.output_token_ids) == 4
    kept = sim.sched.kv.leased_block_ids("docs")
    assert 0 < len(kept) < 11  # only what it needed
    assert ask(sim, "q2", DOC_A, 7).num_cached_tokens == len(kept) * BS  # the document's head is still there
