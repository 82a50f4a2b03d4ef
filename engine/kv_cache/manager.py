"""KV cache manager: per-request block tables over the block pool, prefix caching, class budgets.

The scheduler decides who runs; this class owns memory. `allocate_slots` returns the grown
block table or None, and None is the scheduler's cue to preempt (`check` says why). The
scheduler never touches free lists, reference counts or hashes.

Leases (leases.py): a request with `lease_s > 0` leases its registered blocks when it finishes.
Leased blocks are not available to anyone else and count against the leasing class's share. The
class takes its own leases back when it reaches its cap (within `allocate_slots`), and when the
pool is short only once nothing is left to preempt (`reclaim_leases`, the scheduler's last resort),
so under pressure lower classes' running work and unleased cached blocks go first. Other classes'
leases go only when nothing else could make room (`reclaim_leases(any_class=True)`).

Evicting a prefix (`evict_prefix`, a deleted document) ends its leases and forgets its blocks and
every block continuing it at once; blocks a running request reads stay its own until it finishes,
and what that request registers past them in the meantime is forgotten when it finishes.
"""
from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.kv_cache.block_pool import BlockPool, KVBlock
from engine.kv_cache.budget import ClassKVBudget
from engine.kv_cache.hashing import BlockHash, BlockHashChain, hash_block
from engine.kv_cache.leases import Lease, LeaseTable
from engine.outputs import PrefixEvicted, PrefixEviction
from engine.request import EngineRequest


class AllocStatus(enum.Enum):
    OK = "ok"
    NO_FREE_BLOCKS = "no_free_blocks"  # the pool is short: freeing any blocks helps
    CLASS_MAX_SHARE = "class_max_share"  # the class is at kv_max_share: only its own blocks help
    GUARANTEE_RESERVED = "guarantee_reserved"  # a non-preemptible class would use others' unmet min share


@dataclass(frozen=True)
class KVCacheStats:
    num_blocks: int
    free_blocks: int  # hold nothing
    cached_blocks: int  # unreferenced, hold prefix-cache content (evictable, or leased)
    used_blocks: int  # in live requests' block tables; free + cached + used == num_blocks
    prefix_cache_hit_tokens: int
    prefix_cache_query_tokens: int
    leased_blocks: int = 0  # of cached_blocks: kept by a lease, not available to allocation


@dataclass(frozen=True)
class _Need:
    new_blocks: int  # taken from the pool
    pool_blocks: int  # new blocks + cached hits that leave the evictable set
    class_blocks: int  # blocks the request's class does not hold yet


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(
        self, num_blocks: int, block_size: int, budget: ClassKVBudget | None = None, enable_caching: bool = True,
        clock: Callable[[], float] = time.monotonic, reused_only: frozenset[str] = frozenset(),
    ):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.budget = budget or ClassKVBudget(num_blocks)
        self.enable_caching = enable_caching
        self._tables: dict[str, list[KVBlock]] = {}
        self._chains: dict[str, BlockHashChain] = {}  # kept across preemption, dropped on finish
        self._num_registered: dict[str, int] = {}  # leading table blocks already in the prefix cache
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0
        self.clock = clock  # seconds; leases end by it (tests set a fake one)
        self.leases = LeaseTable()
        # request id -> index of the first block of its table that an eviction forgot while it ran: from
        # there on its blocks (and what it registers after them) are forgotten when it finishes
        self._evicted_from: dict[str, int] = {}
        # Classes whose blocks enter the cache on second use (policy `prefix_cache_reused_only`): the keys of
        # blocks computed once, most recent last, and per request the first block of its own text (from there
        # on nothing of it is registered, also after a preemption)
        self.reused_only = reused_only
        self._seen: OrderedDict[BlockHash, None] = OrderedDict()
        self._seen_cap = max(4096, 4 * num_blocks)
        self._own_from: dict[str, int] = {}

    # ---- prefix cache -------------------------------------------------------------------
    def get_computed_blocks(self, req: EngineRequest) -> tuple[list[KVBlock], int]:
        """Longest run of cached full blocks for the request's tokens, and the tokens they cover.

        At most (num_tokens - 1) // block_size blocks: the last token is always computed so
        the step that finishes the prefill has logits to sample from. The blocks are not
        referenced until `allocate_slots` takes them.
        """
        if not self.enable_caching:
            return [], 0
        hashes = self._chain(req).extend(req.all_token_ids)
        hits: list[KVBlock] = []
        for h in hashes[: (req.num_tokens - 1) // self.block_size]:
            block = self.pool.lookup(h)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def record_prefix_lookup(self, query_tokens: int, hit_tokens: int) -> None:
        """Counts one admitted lookup (the scheduler calls it once the request is scheduled)."""
        self.prefix_query_tokens += query_tokens
        self.prefix_hit_tokens += hit_tokens

    def cache_full_blocks(self, req: EngineRequest) -> None:
        """Registers the request's newly computed full blocks in the prefix cache.

        A block whose key is already cached (another request computed the same prefix in
        the same steps) is swapped for the cached one, so identical content is held once.
        """
        table = self._tables.get(req.request_id)
        if not self.enable_caching or not table:
            return
        start = self._num_registered.get(req.request_id, 0)
        num_full = min(req.num_computed_tokens // self.block_size, len(table))
        if num_full <= start:
            return
        hashes = self._chain(req).extend(req.all_token_ids)
        tokens, bs = req.all_token_ids, self.block_size
        for i in range(start, num_full):
            if req.workload_class in self.reused_only and not self._second_use(req.request_id, i, hashes[i]):
                continue
            parent = hashes[i - 1] if i else None
            cached = self.pool.register(table[i], hashes[i], parent, tuple(tokens[i * bs:(i + 1) * bs]))
            if cached is not table[i]:
                self._swap(req, i, cached)
        self._num_registered[req.request_id] = num_full

    def _second_use(self, rid: str, index: int, block_hash: BlockHash) -> bool:
        """Whether block `index` of request `rid` enters the prefix cache under admission on second use: it is
        cached already or an earlier prompt computed it, and no block before it was the request's own."""
        first_use = block_hash not in self._seen and self.pool.lookup(block_hash) is None
        self._seen[block_hash] = None
        self._seen.move_to_end(block_hash)
        if len(self._seen) > self._seen_cap:
            self._seen.popitem(last=False)
        if first_use and rid not in self._own_from:
            self._own_from[rid] = index
        return index < self._own_from.get(rid, index + 1)

    # ---- allocation ---------------------------------------------------------------------
    def check(self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock] = ()) -> AllocStatus:
        """Whether `allocate_slots` with the same arguments would succeed, and if not, why."""
        self._expire_leases()
        cls = req.workload_class
        need = self._need(req, num_new_tokens, computed)
        give_up = self.budget.over_max(cls, need.class_blocks)  # own leases to end to stay under the cap
        if give_up and give_up > len(self._spare_leases(cls, computed)):
            return AllocStatus.CLASS_MAX_SHARE
        available = self.pool.num_available + give_up  # an ended lease's block becomes evictable
        if need.pool_blocks > available:
            return AllocStatus.NO_FREE_BLOCKS
        left = available - need.pool_blocks
        if not self.budget.share(cls).preemptible and left < self.budget.unmet_min_of_others(cls):
            return AllocStatus.GUARANTEE_RESERVED
        return AllocStatus.OK

    def fits_class_cap(self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock] = ()) -> bool:
        """Whether the class's max share leaves room for `num_new_tokens` more tokens of `req`
        (once the class gives up its own leases if it must)."""
        self._expire_leases()
        need = self._need(req, num_new_tokens, computed)
        give_up = self.budget.over_max(req.workload_class, need.class_blocks)
        return give_up == 0 or give_up <= len(self._spare_leases(req.workload_class, computed))

    def allocate_slots(
        self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock] = ()
    ) -> list[int] | None:
        """Grows the request's table to cover num_computed_tokens + cached + num_new_tokens tokens.

        `computed` (from get_computed_blocks) may only be given for a request without a
        table; the caller then sets num_computed_tokens to the tokens they cover.
        Returns the whole block table, or None (nothing changed) if memory or budget says no.
        """
        if self.check(req, num_new_tokens, computed) is not AllocStatus.OK:
            return None
        rid, cls = req.request_id, req.workload_class
        need = self._need(req, num_new_tokens, computed)
        give_up = self.budget.over_max(cls, need.class_blocks)
        table = self._tables.setdefault(rid, [])
        if computed:
            self.pool.touch(computed)  # before allocating, so eviction cannot take them
            table.extend(computed)
            self._num_registered[rid] = len(computed)
        if give_up:
            self._end_leases(self._spare_leases(cls, computed)[:give_up])
        new = self.pool.allocate(need.new_blocks)
        table.extend(new)
        self.budget.acquire(cls, [b.block_id for b in (*computed, *new)])
        return [b.block_id for b in table]

    def trim(self, req: EngineRequest) -> int:
        """Frees the blocks of the request's table past those its tokens need; returns how many.

        A verified draft's rejected positions (engine/speculative/) were written into blocks allocated for the
        whole draft. Registration covers computed (accepted) tokens only, so none of those blocks is in the
        prefix cache, and the rejected K/V left in the last kept block is overwritten before that block is full.
        """
        table = self._tables.get(req.request_id)
        keep = _cdiv(req.num_tokens, self.block_size)
        if not table or len(table) <= keep:
            return 0
        extra = table[keep:]
        del table[keep:]
        assert all(b.block_hash is None and b.ref_cnt == 1 for b in extra), "a draft's blocks are its own"
        self.budget.release(req.workload_class, [b.block_id for b in extra])
        self.pool.release(reversed(extra))
        return len(extra)

    def free(self, req: EngineRequest, *, keep_hashes: bool = False) -> None:
        """Drops the request's table. Preemption keeps the request's block keys (its tokens stay).

        A finished request (not a preempted one) with `lease_s > 0` leases its registered blocks first.
        """
        self._expire_leases()
        rid = req.request_id
        table = self._tables.pop(rid, None)
        cut = self._evicted_from.get(rid) if keep_hashes else self._evicted_from.pop(rid, None)
        if table:
            registered = min(self._num_registered.get(rid, 0), self._own_from.get(rid, len(table)))
            if not keep_hashes and req.lease_s > 0:
                self._lease(req, table[: registered if cut is None else min(cut, registered)])
            self.budget.release(req.workload_class, [b.block_id for b in table])
            # Tail first: the deepest blocks of a prefix become the first to be evicted.
            self.pool.release(reversed(table))
            if cut is not None and not keep_hashes:  # its prefix was evicted while it ran
                self._forget(table[cut:])
        self._num_registered.pop(rid, None)
        if not keep_hashes:
            self._chains.pop(rid, None)
            self._own_from.pop(rid, None)

    # ---- leases -------------------------------------------------------------------------
    def reclaim_leases(self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock] = (), *,
                       any_class: bool = False) -> bool:
        """The scheduler's last resort when the pool is short and nothing is left to preempt: the
        request's class gives up just enough of its own leases (soonest to expire, deepest first);
        with `any_class` (the scheduler's call: nothing else runs that could free blocks, or the
        request is starving) other classes' leases follow. Returns False, changing nothing, when all of them would not make room."""
        self._expire_leases()
        cls = req.workload_class
        need = self._need(req, num_new_tokens, computed)
        short = need.pool_blocks - self.pool.num_available
        if not self.budget.share(cls).preemptible:
            short += self.budget.unmet_min_of_others(cls)
        k = max(short, self.budget.over_max(cls, need.class_blocks))
        spare = self._spare_leases(cls, computed)
        if any_class:
            spare += [b for c in sorted({le.workload_class for le in self.leases.all()} - {cls})
                      for b in self._spare_leases(c, computed)]
        if k <= 0 or k > len(spare):
            return False
        self._end_leases(spare[:k])
        return True

    def leased_block_ids(self, workload_class: str) -> list[int]:
        self._expire_leases()
        return self.leases.of_class(workload_class)

    # ---- evicting a prefix ----------------------------------------------------------------
    def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        """Ends the leases of `prefix`'s blocks and of every block continuing it, and forgets them: the next
        request on the same tokens is a cache miss. The blocks wholly inside `keep_tokens` stay. A block a
        running request reads is freed when it finishes (its KV is never taken from under it)."""
        self._expire_leases()
        bs, keep = self.block_size, prefix.keep_tokens // self.block_size
        if not self.enable_caching or len(prefix.token_ids) <= keep * bs:
            return PrefixEvicted()
        hashes = BlockHashChain(bs, prefix.cache_salt).extend(prefix.token_ids)
        if len(hashes) > keep:
            roots = [hashes[keep]]
        else:  # the prefix ends inside the first block to evict: its continuations start with its tail
            parent, tail = (hashes[keep - 1] if keep else None), tuple(prefix.token_ids[keep * bs:])
            roots = self._continuations(parent, tail, prefix.cache_salt)
        blocks = self.pool.subtree(roots)
        leased = [b for b in blocks if b.pinned]
        used = {b.block_id for b in blocks if b.ref_cnt > 0}
        if used:
            for rid, table in self._tables.items():
                first = next((i for i, b in enumerate(table) if b.block_id in used), None)
                if first is not None:
                    self._evicted_from[rid] = min(first, self._evicted_from.get(rid, first))
        freed, held = self._forget(blocks)
        return PrefixEvicted(blocks=len(blocks), freed=freed, held=held, leases_ended=len(leased))

    def _continuations(self, parent: BlockHash | None, tail: tuple[int, ...], salt: str) -> list[BlockHash]:
        """Keys of the registered blocks after `parent` whose tokens start with `tail`, in `salt`."""
        out = []
        for block in self.pool.children(parent):
            key = block.block_hash
            if key is not None and block.token_ids[: len(tail)] == tail and key == hash_block(parent, block.token_ids,
                                                                                              salt):
                out.append(key)
        return out

    def _forget(self, blocks: Sequence[KVBlock]) -> tuple[int, int]:
        self._end_leases([b for b in blocks if b.pinned])
        return self.pool.forget(blocks)

    def _lease(self, req: EngineRequest, blocks: Sequence[KVBlock]) -> None:
        cls, until = req.workload_class, self.clock() + req.lease_s
        for depth, block in enumerate(blocks):
            if block.block_hash is None:  # forgotten (its prefix was evicted) while the request held it
                continue
            prev = self.leases.get(block.block_id)
            if prev is None or prev.workload_class != cls:
                if prev is not None:
                    self.budget.release(prev.workload_class, [block.block_id])
                self.budget.acquire(cls, [block.block_id])
            self.pool.pin(block)
            self.leases.grant(block.block_id, Lease(cls, max(until, prev.until) if prev else until, depth))

    def _end_leases(self, blocks: Sequence[KVBlock]) -> None:
        ended = []
        for block in blocks:
            lease = self.leases.drop(block.block_id)
            if lease is not None:
                self.budget.release(lease.workload_class, [block.block_id])
                ended.append((lease.depth, block))
        ended.sort(key=lambda e: e[0])  # shallow first: the deepest ends up first in eviction order
        self.pool.unpin(b for _, b in ended)

    def _expire_leases(self) -> None:
        if len(self.leases):
            expired = self.leases.expired(self.clock())
            if expired:
                self._end_leases([self.pool.blocks[b] for b in expired])

    def _spare_leases(self, workload_class: str, computed: Sequence[KVBlock]) -> list[KVBlock]:
        """The class's leased blocks no table holds, outside `computed`, in the order it gives them up."""
        keep = {b.block_id for b in computed}
        blocks = (self.pool.blocks[b] for b in self.leases.of_class(workload_class) if b not in keep)
        return [b for b in blocks if b.ref_cnt == 0]

    # ---- introspection ------------------------------------------------------------------
    def block_table(self, request_id: str) -> list[int]:
        return [b.block_id for b in self._tables.get(request_id, ())]

    def num_freeable(self, request_id: str) -> int:
        """Blocks that would become available if this request were freed (those only it holds)."""
        return sum(1 for b in self._tables.get(request_id, ()) if b.ref_cnt == 1)

    def shortfall(self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock] = ()) -> int:
        """Blocks that must become available, by preemption, before this allocation passes the pool and
        reserve checks (the class's own leases count as available: `reclaim_leases` gives them up)."""
        self._expire_leases()
        cls = req.workload_class
        need = self._need(req, num_new_tokens, computed).pool_blocks
        if not self.budget.share(cls).preemptible:
            need += self.budget.unmet_min_of_others(cls)
        return max(0, need - self.pool.num_available - len(self._spare_leases(cls, computed)))

    def stats(self) -> KVCacheStats:
        self._expire_leases()
        p = self.pool
        return KVCacheStats(
            p.num_blocks, p.num_free, p.num_evictable + p.num_leased, p.num_used - p.num_leased,
            self.prefix_hit_tokens, self.prefix_query_tokens, p.num_leased,
        )

    # ---- internals ----------------------------------------------------------------------
    def _need(self, req: EngineRequest, num_new_tokens: int, computed: Sequence[KVBlock]) -> _Need:
        table = self._tables.get(req.request_id, ())
        if computed and table:
            raise ValueError("cached blocks can only start an empty block table")
        tokens = req.num_computed_tokens + len(computed) * self.block_size + num_new_tokens
        new = max(0, _cdiv(tokens, self.block_size) - len(table) - len(computed))
        cls = req.workload_class
        revived = sum(1 for b in computed if b.ref_cnt == 0 and not b.pinned)  # leased ones were not available
        not_held = sum(1 for b in computed if not self.budget.holds(cls, b.block_id))
        return _Need(new, new + revived, new + not_held)

    def _chain(self, req: EngineRequest) -> BlockHashChain:
        chain = self._chains.get(req.request_id)
        if chain is None or chain.salt != req.cache_salt:  # a new salt (Scheduler.recompute): new keys
            chain = self._chains[req.request_id] = BlockHashChain(self.block_size, req.cache_salt)
        return chain

    def _swap(self, req: EngineRequest, index: int, cached: KVBlock) -> None:
        table, cls = self._tables[req.request_id], req.workload_class
        own = table[index]
        self.pool.touch([cached])
        self.budget.acquire(cls, [cached.block_id])
        table[index] = cached
        self.budget.release(cls, [own.block_id])
        self.pool.release([own])
