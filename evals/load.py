"""Synthetic engine load shared by `finserve eval verdict --under-load` and `finserve bench isolation`: random
prompts of a given length, bulk requests kept in flight, and one long document, against an EngineClient."""
from __future__ import annotations

import asyncio
import random
import uuid

from engine.client import LocalEngineClient
from engine.request import EngineRequest, SamplingParams

BULK_PROMPT_TOKENS = 300
BULK_OUTPUT_TOKENS = 96
DOC_TOKENS = 4000


def random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(200, 40000) for _ in range(n)]


async def complete(client: LocalEngineClient, req: EngineRequest) -> EngineRequest:
    """`req` run to its end (its outputs are read off the request itself)."""
    async for _ in client.generate(req):
        pass
    return req


def random_request(rng: random.Random, n_in: int, n_out: int, cls: str, tenant: str = "") -> EngineRequest:
    """`n_in` random prompt tokens, exactly `n_out` output tokens (EOS ignored), in class `cls`."""
    return EngineRequest(uuid.uuid4().hex, random_ids(rng, n_in), SamplingParams(max_tokens=n_out, ignore_eos=True),
                         cls, tenant=tenant)


async def bulk_pump(client: LocalEngineClient, rng: random.Random, in_flight: int, stop: asyncio.Event,
                    done: list[EngineRequest]) -> None:
    """Keeps `in_flight` bulk requests running until `stop` is set; each finished one is appended to `done`."""
    async def worker() -> None:
        while not stop.is_set():
            done.append(await complete(client, random_request(rng, BULK_PROMPT_TOKENS, BULK_OUTPUT_TOKENS,
                                                              "bulk_extraction")))

    await asyncio.gather(*(worker() for _ in range(in_flight)))
