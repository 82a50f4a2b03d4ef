"""KV cache bookkeeping (no torch): block pool, prefix-cache keys, per-class budgets, block tables."""
from engine.kv_cache.block_pool import BlockPool, KVBlock
from engine.kv_cache.budget import ClassKVBudget, ClassShare
from engine.kv_cache.manager import AllocStatus, KVCacheManager, KVCacheStats

__all__ = ["AllocStatus", "BlockPool", "ClassKVBudget", "ClassShare", "KVBlock", "KVCacheManager", "KVCacheStats"]
