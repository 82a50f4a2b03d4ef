"""Prefix-cache keys: a hash chain over full blocks of token ids, salted per tenant.

A block's key covers its parent's key, its own token ids and the cache salt, so two blocks
share a key only when the whole token prefix up to and including them is identical and
they belong to the same salt (tenant). SHA-256 keeps a collision, which would serve one
tenant's KV to another, out of reach; it costs one hash per full block, small next to the block's prefill.
"""
from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

BlockHash = bytes  # 32-byte SHA-256 digest

_ROOT = bytes(32)  # parent key of a request's first block


def hash_block(parent: BlockHash | None, token_ids: Sequence[int], salt: str) -> BlockHash:
    h = hashlib.sha256(parent or _ROOT)
    salt_bytes = salt.encode()
    h.update(len(salt_bytes).to_bytes(4, "little"))
    h.update(salt_bytes)
    h.update(array("q", token_ids).tobytes())
    return h.digest()


class BlockHashChain:
    """Keys of one request's full blocks, extended incrementally as its tokens grow.

    Token ids of a request only ever get appended (prompt, then sampled tokens), so keys
    computed once stay valid, across preemption too.
    """

    def __init__(self, block_size: int, salt: str):
        self.block_size = block_size
        self.salt = salt
        self.hashes: list[BlockHash] = []

    def extend(self, token_ids: Sequence[int]) -> list[BlockHash]:
        """Hashes every full block of `token_ids` not hashed yet; returns all keys so far."""
        bs = self.block_size
        for i in range(len(self.hashes), len(token_ids) // bs):
            parent = self.hashes[-1] if self.hashes else None
            self.hashes.append(hash_block(parent, token_ids[i * bs : (i + 1) * bs], self.salt))
        return self.hashes
