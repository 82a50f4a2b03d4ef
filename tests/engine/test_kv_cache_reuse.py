"""Admission on second use (policy `prefix_cache_reused_only`): a class whose prompts share instructions but
never repeat their own text caches the shared blocks, from the second prompt on, and nothing else."""
from __future__ import annotations

from engine.kv_cache import KVCacheManager
from policies import load_policy
from tests.engine.sched_sim import make_scheduler
from tests.engine.test_kv_cache import BS, prefill, req

SHARED = list(range(100, 112))  # three full blocks of instructions every item starts with


def item(own: int) -> list[int]:
    return SHARED + [own * 10 + i for i in range(1, 10)]  # two more full blocks and a token of its own


def hits(kv: KVCacheManager, tokens: list[int], cls: str = "bulk") -> int:
    return kv.get_computed_blocks(req("probe", tokens, cls))[1]


def test_shared_blocks_are_cached_from_the_second_prompt_own_text_never() -> None:
    kv = KVCacheManager(32, BS, reused_only=frozenset({"bulk"}))
    items = [req(rid, item(n), "bulk") for n, rid in enumerate("abc", 1)]
    prefill(kv, items[0])
    assert hits(kv, item(2)) == 0  # one prompt computed them: nothing is cached yet
    prefill(kv, items[1])
    assert hits(kv, item(3)) == 12  # the second computed the shared blocks again: now cached
    assert hits(kv, item(2)) == 12  # b's own blocks were computed once: not cached
    assert prefill(kv, items[2])[:3] == kv.block_table("b")[:3]  # c reads the cached ones
    for r in items:
        kv.free(r)
    assert kv.stats().cached_blocks == 3  # nothing else entered the cache


def test_other_classes_cache_at_first_use() -> None:
    kv = KVCacheManager(32, BS, reused_only=frozenset({"bulk"}))
    prefill(kv, req("a", item(1), "docs"))
    assert hits(kv, item(1), "docs") == 20


def test_a_preempted_prompt_resumes_without_caching_its_own_text() -> None:
    kv = KVCacheManager(32, BS, reused_only=frozenset({"bulk"}))
    prefill(kv, req("a", item(1), "bulk"))
    b = req("b", item(1)[:12] + [9, 9, 9, 9, 8, 8, 8, 8, 7], "bulk")
    prefill(kv, b)  # shares a's first three blocks: registered; its own two are first uses
    kv.free(b, keep_hashes=True)  # preempted
    b.num_computed_tokens = 0
    prefill(kv, b)  # resumed: its own blocks were seen (by itself), yet they stay out of the cache
    kv.free(b)
    assert hits(kv, b.all_token_ids) == 12


def test_the_default_policy_admits_bulk_extraction_blocks_on_second_use_only() -> None:
    policy = load_policy()
    scheduler = make_scheduler(policy)
    assert scheduler.kv.reused_only == {c.name for c in policy.classes.values() if c.prefix_cache_reused_only}
    assert policy.get("bulk_extraction").prefix_caching and policy.get("bulk_extraction").prefix_cache_reused_only
