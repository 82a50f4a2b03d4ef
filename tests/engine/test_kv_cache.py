"""KV cache bookkeeping on a fake pool: block tables, prefix cache, LRU eviction, class budgets."""
from __future__ import annotations

import subprocess
import sys

import pytest

from engine.kv_cache import AllocStatus, ClassKVBudget, ClassShare, KVCacheManager
from engine.kv_cache.hashing import BlockHashChain, hash_block
from engine.request import EngineRequest, SamplingParams

BS = 4


def req(rid: str, tokens: list[int] | int, cls: str = "c", salt: str = "") -> EngineRequest:
    ids = list(range(1, tokens + 1)) if isinstance(tokens, int) else tokens
    return EngineRequest(rid, ids, SamplingParams(), workload_class=cls, cache_salt=salt)


def prefill(kv: KVCacheManager, r: EngineRequest, *, cache: bool = True) -> list[int]:
    """Admits `r` the way the scheduler does: prefix lookup, allocation, whole prompt computed."""
    computed, n_cached = kv.get_computed_blocks(r)
    table = kv.allocate_slots(r, r.num_tokens - n_cached, computed)
    assert table is not None
    r.num_computed_tokens = r.num_tokens
    if cache:
        kv.cache_full_blocks(r)
    return table


def test_scheduler_and_kv_cache_import_no_torch():
    code = "import sys, engine.sched.scheduler, engine.kv_cache; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hash_chain_depends_on_prefix_tokens_and_salt():
    a = BlockHashChain(BS, "t1").extend(list(range(10)))
    assert len(a) == 2  # only full blocks
    assert a == BlockHashChain(BS, "t1").extend(list(range(10)))
    assert BlockHashChain(BS, "t2").extend(list(range(10)))[0] != a[0]
    assert hash_block(None, [4, 5, 6, 7], "t1") != a[1]  # same tokens, different parent


def test_allocate_grows_table_and_free_returns_blocks():
    kv = KVCacheManager(8, BS, enable_caching=False)
    r = req("a", 6)
    assert len(kv.allocate_slots(r, 6)) == 2
    r.num_computed_tokens = 6
    assert len(kv.allocate_slots(r, 1)) == 2  # token 7 still fits block 2
    r.num_computed_tokens = 8
    assert len(kv.allocate_slots(r, 1)) == 3
    assert kv.pool.num_used == 3
    kv.free(r)
    assert (kv.pool.num_used, kv.pool.num_free) == (0, 8)


def test_allocate_returns_none_without_change_when_pool_is_short():
    kv = KVCacheManager(4, BS, enable_caching=False)
    assert kv.allocate_slots(req("a", 12), 12) is not None
    b = req("b", 8)
    assert kv.allocate_slots(b, 8) is None
    assert kv.check(b, 8) is AllocStatus.NO_FREE_BLOCKS
    assert kv.block_table("b") == [] and kv.pool.num_free == 1


def test_prefix_hit_same_salt_reuses_blocks_different_salt_does_not():
    kv = KVCacheManager(16, BS)
    doc = list(range(100, 112))  # three full blocks
    first = prefill(kv, req("q1", doc + [1, 2], salt="tenantA"))
    second = req("q2", doc + [7, 8, 9], salt="tenantA")
    blocks, n = kv.get_computed_blocks(second)
    assert n == 12 and [b.block_id for b in blocks] == first[:3]
    table = prefill(kv, second)
    assert table[:3] == first[:3] and table[3] not in first
    assert kv.pool.num_used == 5  # shared blocks are held once

    other = req("q3", doc + [1, 2], salt="tenantB")
    assert kv.get_computed_blocks(other) == ([], 0)


def test_fully_cached_prompt_still_computes_its_last_token():
    kv = KVCacheManager(8, BS)
    prefill(kv, req("a", 8))
    _, n = kv.get_computed_blocks(req("b", 8))
    assert n == 4  # not 8: the last block holds the token whose logits are needed


def test_cached_blocks_survive_free_and_are_evicted_lru_only_under_pressure():
    kv = KVCacheManager(6, BS)
    old, new = req("old", list(range(10, 18)) + [0]), req("new", list(range(20, 28)) + [0])
    prefill(kv, old)
    prefill(kv, new)
    kv.free(old)
    kv.free(new)
    assert (kv.pool.num_evictable, kv.pool.num_free) == (4, 2)
    # Free blocks are used first: both prefixes stay cached.
    filler = req("f", 8)
    assert kv.allocate_slots(filler, 8) is not None
    assert kv.get_computed_blocks(req("o2", list(range(10, 18)) + [0]))[1] == 8
    # Now memory is needed: the least recently released prefix goes, tail block first.
    assert kv.allocate_slots(req("g", 4, cls="d"), 4) is not None
    assert kv.get_computed_blocks(req("o3", list(range(10, 18)) + [0]))[1] == 4
    assert kv.get_computed_blocks(req("n2", list(range(20, 28)) + [0]))[1] == 8


def test_a_hit_revives_an_evictable_block_instead_of_evicting_it():
    kv = KVCacheManager(3, BS)
    a = req("a", list(range(10, 18)) + [0])
    prefill(kv, a)
    kv.free(a)
    b = req("b", list(range(10, 18)) + [5, 6, 7, 8])  # hits 2 blocks, needs 1 new
    assert len(prefill(kv, b)) == 3 and kv.pool.num_evictable == 0


def test_identical_blocks_computed_concurrently_are_deduplicated():
    kv = KVCacheManager(8, BS)
    a, b = req("a", list(range(1, 9)) + [50]), req("b", list(range(1, 9)) + [60])
    ta, tb = prefill(kv, a, cache=False), prefill(kv, b, cache=False)
    assert kv.pool.num_used == 6
    kv.cache_full_blocks(a)
    kv.cache_full_blocks(b)
    assert kv.block_table("b")[:2] == ta[:2] and kv.block_table("b")[2] == tb[2]
    assert kv.pool.num_used == 4 and kv.pool.blocks[ta[0]].ref_cnt == 2
    kv.free(a)
    kv.free(b)
    assert kv.pool.num_used == 0 and kv.pool.num_evictable == 2


def test_class_max_share_caps_a_class_and_counts_shared_blocks_once():
    budget = ClassKVBudget(16, {"d": ClassShare.of(16, 0.0, 0.25, True)})
    kv = KVCacheManager(16, BS, budget)
    doc = list(range(100, 108))
    prefill(kv, req("q1", doc + [1], cls="d"))
    prefill(kv, req("q2", doc + [2], cls="d"))
    assert budget.held("d") == 4  # 2 shared document blocks + 1 tail each
    third = req("q3", 4, cls="d")
    assert kv.allocate_slots(third, 4) is None
    assert kv.check(third, 4) is AllocStatus.CLASS_MAX_SHARE
    assert kv.allocate_slots(req("x", 40, cls="other"), 40) is not None  # other classes are not capped by it


def test_non_preemptible_class_cannot_borrow_anothers_unmet_minimum():
    shares = {"rt": ClassShare.of(16, 0.0, 1.0, False), "docs": ClassShare.of(16, 0.5, 1.0, True)}
    budget = ClassKVBudget(16, shares)
    kv = KVCacheManager(16, BS, budget, enable_caching=False)
    assert kv.allocate_slots(req("a", 32, cls="rt"), 32) is not None  # 8 blocks: docs' 8 stay free
    late = req("b", 4, cls="rt")
    assert kv.check(late, 4) is AllocStatus.GUARANTEE_RESERVED
    assert kv.shortfall(late, 4) == 1
    assert kv.allocate_slots(req("c", 4, cls="docs"), 4) is not None  # the owner may use it
    assert budget.max_usable("rt") == 8


@pytest.mark.parametrize("bad", [0, -3])
def test_pool_rejects_non_positive_size(bad):
    with pytest.raises(ValueError):
        KVCacheManager(bad, BS)
