"""The fixed pool of KV blocks: reference counts, the free queue, the prefix-cache map.

Every block is in exactly one of four states:
  used    ref_cnt > 0: in at least one live request's block table
  leased  ref_cnt == 0, pinned by a lease (leases.py): cached, never evicted until unpinned
  cached  ref_cnt == 0 with a prefix-cache key, not pinned: evictable, kept in LRU order
  free    ref_cnt == 0 without a key
Allocation takes free blocks first and evicts the least recently released cached block only
when no free block is left, so cached prefixes survive as long as memory allows.
A block can also be taken out of the prefix cache on purpose (`forget`, a deleted document): an
unreferenced one is free at once, a used one keeps its KV for the requests reading it and is free
when the last of them releases it. Registered blocks are indexed under their parent's key, so the
blocks that continue a prefix (`subtree`) are found without knowing their tokens.
The pool knows nothing of requests or classes; KVCacheManager does.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from engine.kv_cache.hashing import BlockHash


@dataclass(eq=False)
class KVBlock:
    block_id: int  # index into the model runner's KV tensor
    ref_cnt: int = 0  # block tables holding this block
    block_hash: BlockHash | None = None  # prefix-cache key once the block is full and registered
    pinned: bool = False  # leased: at ref_cnt 0 it waits in the leased set instead of the evictable one
    parent_hash: BlockHash | None = None  # while registered: the key of the block before it (None: first block)
    token_ids: tuple[int, ...] = ()  # while registered: its tokens (a prefix ending inside it is matched by them)


_FIRST = b""  # the parent key under which first blocks are indexed


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self._free: deque[KVBlock] = deque(self.blocks)
        self._evictable: OrderedDict[int, KVBlock] = OrderedDict()  # block_id -> block, LRU first
        self._leased: dict[int, KVBlock] = {}  # unreferenced pinned blocks
        self._by_hash: dict[BlockHash, KVBlock] = {}  # every registered block, used or evictable
        # parent key -> {key: block} of the registered blocks that continue it; a parent evicted before its
        # children keeps its entry until they go, so a prefix's continuations stay reachable from its key.
        self._children: dict[BlockHash, dict[BlockHash, KVBlock]] = {}

    # ---- counts -------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks holding nothing."""
        return len(self._free)

    @property
    def num_evictable(self) -> int:
        """Unreferenced blocks still holding prefix-cache content."""
        return len(self._evictable)

    @property
    def num_leased(self) -> int:
        """Unreferenced blocks kept by a lease: cached, but not available to allocation."""
        return len(self._leased)

    @property
    def num_available(self) -> int:
        """Blocks an allocation may take: free ones, then evicted cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_available

    # ---- prefix cache -------------------------------------------------------------------
    def lookup(self, block_hash: BlockHash) -> KVBlock | None:
        return self._by_hash.get(block_hash)

    def register(self, block: KVBlock, block_hash: BlockHash, parent_hash: BlockHash | None = None,
                 token_ids: tuple[int, ...] = ()) -> KVBlock:
        """Makes `block` the cached block for `block_hash` (whose prefix continues `parent_hash` with
        `token_ids`); returns the block that holds the key.

        If another block already holds the key, that one is returned and `block` stays
        unregistered: the map never keeps two blocks for the same content.
        """
        existing = self._by_hash.get(block_hash)
        if existing is not None:
            return existing
        block.block_hash, block.parent_hash, block.token_ids = block_hash, parent_hash, token_ids
        self._by_hash[block_hash] = block
        self._children.setdefault(parent_hash or _FIRST, {})[block_hash] = block
        return block

    def children(self, parent_hash: BlockHash | None) -> list[KVBlock]:
        """Registered blocks whose prefix continues `parent_hash` (None: first blocks, of every salt)."""
        return list(self._children.get(parent_hash or _FIRST, {}).values())

    def subtree(self, roots: Iterable[BlockHash]) -> list[KVBlock]:
        """The registered blocks under the keys `roots` and every block continuing them, however deep
        (a key whose own block was evicted still leads to its registered continuations)."""
        out: list[KVBlock] = []
        stack = list(roots)
        while stack:
            key = stack.pop()
            block = self._by_hash.get(key)
            if block is not None:
                out.append(block)
            stack.extend(self._children.get(key, {}))
        return out

    def forget(self, blocks: Iterable[KVBlock]) -> tuple[int, int]:
        """Takes `blocks` out of the prefix cache: no later lookup finds them. Returns (freed now, held):
        an unreferenced block is free at once; a referenced one keeps its KV for the requests reading it
        and becomes free, not cached, when the last one releases it. Leases must be ended first."""
        freed = held = 0
        for block in blocks:
            if block.block_hash is None:
                continue
            if block.pinned:
                raise RuntimeError(f"block {block.block_id} is leased: end its lease before forgetting it")
            self._unregister(block)
            if block.ref_cnt == 0:
                del self._evictable[block.block_id]
                self._free.append(block)
                freed += 1
            else:
                held += 1
        return freed, held

    # ---- reference counting -------------------------------------------------------------
    def allocate(self, n: int) -> list[KVBlock]:
        """Takes `n` blocks (free first, then LRU evictions) with ref_cnt 1. Caller checks num_available."""
        if n > self.num_available:
            raise RuntimeError(f"asked for {n} blocks, {self.num_available} available")
        out = []
        for _ in range(n):
            block = self._free.popleft() if self._free else self._evict_lru()
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Adds a reference to cached blocks (a prefix hit); an evictable one becomes used again."""
        for block in blocks:
            if block.block_hash is None:
                raise RuntimeError(f"block {block.block_id} is not in the prefix cache")
            if block.ref_cnt == 0:
                del (self._leased if block.pinned else self._evictable)[block.block_id]
            block.ref_cnt += 1

    def release(self, blocks: Iterable[KVBlock]) -> None:
        """Drops a reference; at zero a cached block becomes evictable (most recently used), others free."""
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"block {block.block_id} released more often than taken")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.pinned:
                    self._leased[block.block_id] = block
                elif block.block_hash is not None:
                    self._evictable[block.block_id] = block
                else:
                    self._free.append(block)

    # ---- leases -------------------------------------------------------------------------
    def pin(self, block: KVBlock) -> None:
        """Keeps a cached block out of eviction (a lease); it stays a prefix hit as before."""
        if block.block_hash is None:
            raise RuntimeError(f"block {block.block_id} is not in the prefix cache")
        if not block.pinned and block.ref_cnt == 0:
            self._leased[block.block_id] = self._evictable.pop(block.block_id)
        block.pinned = True

    def unpin(self, blocks: Iterable[KVBlock]) -> None:
        """Ends leases: unreferenced blocks become evictable, ahead of every other cached block.

        They were last used a lease ago, longer than anything released since; given in order,
        the last one given is the first evicted.
        """
        for block in blocks:
            if not block.pinned:
                continue
            block.pinned = False
            if block.ref_cnt == 0:
                del self._leased[block.block_id]
                self._evictable[block.block_id] = block
                self._evictable.move_to_end(block.block_id, last=False)

    def _evict_lru(self) -> KVBlock:
        _, block = self._evictable.popitem(last=False)
        self._unregister(block)
        return block

    def _unregister(self, block: KVBlock) -> None:
        key = block.block_hash
        assert key is not None  # only registered blocks are evicted or forgotten
        del self._by_hash[key]
        parent = block.parent_hash or _FIRST
        siblings = self._children.get(parent)
        if siblings is not None:
            siblings.pop(key, None)
            if not siblings:
                del self._children[parent]
        block.block_hash, block.parent_hash, block.token_ids = None, None, ()
