"""A deleted document's KV: its prompt prefix found, and evicted from the engine's prefix cache early.

Every question on a document starts with the same tokens (gateway/prompts.py `document_messages`: the
document first, the question last), salted with the tenant, and leases them for the class's
`kv_lease_s`. Deleting the document asks the engine (every replica, with several) to end those leases
and free the blocks, and those of every question asked after them, now rather than when the lease runs
out. The leading blocks that hold only the instructions and the title stay: the tenant's other
documents start with the same tokens, and evicting them would make their questions cache misses too.
"""
from __future__ import annotations

import asyncio
import functools

import structlog

from engine.outputs import PrefixEvicted, PrefixEviction
from engine.protocol import EngineClient
from engine.tokenizer import Tokenizer
from gateway.prompts import document_messages

log = structlog.get_logger("finserve.documents")

EVICT_TIMEOUT_S = 10.0  # an engine busy past this still evicts when its step ends; the answer does not wait
_OTHER_TEXTS = ("x", "y")  # two texts that differ at their first character: one of them differs from any document
_QUESTIONS = ("A", "B")


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@functools.lru_cache(maxsize=64)
def shared_prefix_tokens(tokenizer: Tokenizer, title: str, text: str) -> int:
    """How many leading tokens every question on the document shares: its prompt up to the question. Engine
    replicas are routed on them (EngineRequest.affinity_tokens), so every question lands where they are cached."""
    first, second = (tokenizer.encode_chat(document_messages(title, text, q)) for q in _QUESTIONS)
    return _common(first, second)


def document_prefix(tokenizer: Tokenizer, title: str, text: str, tenant: str) -> PrefixEviction:
    """The tokens every question on the document starts with (the part two different questions' prompts
    share), keeping the part its prompts share with other texts under the same title (the instructions
    and the header, however the chat template tokenizes them)."""
    def prompt(body: str, question: str) -> list[int]:
        return tokenizer.encode_chat(document_messages(title, body, question))

    first, second = (prompt(text, q) for q in _QUESTIONS)
    end = _common(first, second)
    keep = min(_common(first, prompt(other, _QUESTIONS[0])) for other in _OTHER_TEXTS)
    return PrefixEviction(token_ids=first[:end], cache_salt=tenant, keep_tokens=min(keep, end))


async def evict_document(client: EngineClient | None, title: str, text: str, tenant: str) -> PrefixEvicted | None:
    """Evict a deleted document's cached blocks and leases; None when no engine serves (nothing to evict
    here: a replica that comes back later still has the leases, which run out on their own)."""
    if client is None or not client.running:
        return None
    prefix = await asyncio.to_thread(document_prefix, client.tokenizer, title, text, tenant)
    try:
        return await asyncio.wait_for(client.evict_prefix(prefix), EVICT_TIMEOUT_S)
    except TimeoutError:
        log.warning("document_evict_timed_out", timeout_s=EVICT_TIMEOUT_S)
        return None
