"""Deleting a document frees its KV at once (gateway/domain/document_cache.py -> EngineClient.evict_prefix): its
leases end, its cached blocks and its questions' leave the prefix cache (the free block count comes back, the
same text asked again is a cache miss), and a question still running on it finishes with the answer it would
have given, its blocks freed only when it is done. Only the leading blocks every document prompt of the tenant
starts with (instructions, title) stay cached."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from engine.client import LocalEngineClient
from gateway.domain.document_cache import document_prefix
from policies import load_policy
from stack.app import create_app
from tests.gateway.conftest import Keys, auth, make_client, wait_for

TEXT = " ".join(f"Article {i}: an institution holds capital of {i * 3} percent against exposure {i}." for i in range(20))
# A free answer (no figure lead to write at once), so it is still decoding when the document is deleted
QUESTION = {"question": "What must an institution hold?", "max_tokens": 24}


class Hold:
    """Pauses the engine loop's steps (returning no work, so its inbox is still served) once `arm(n)` has let
    `n` more steps run, until `release()`."""

    def __init__(self, client: LocalEngineClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self._step = client.engine.step
        self._left: int | None = None
        self.paused, self._go = threading.Event(), threading.Event()
        monkeypatch.setattr(client.engine, "step", self.step)

    def arm(self, steps: int) -> None:
        self._left = steps

    def release(self) -> None:
        self._go.set()

    def step(self, before_compute: Callable[[], None] | None = None) -> list[Any]:
        if self._left is not None and self._left <= 0 and not self._go.is_set():
            self.paused.set()
            time.sleep(0.005)
            return []
        if self._left is not None:
            self._left -= 1
        return self._step(before_compute)


async def test_deleting_a_document_frees_its_kv_and_a_running_question_still_finishes(
        tiny_model_dir: Path, settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_client(tiny_model_dir, load_policy())  # its own pool: the counts below are this test's
    hold = Hold(engine, monkeypatch)
    app = create_app(settings, engine_client=engine)
    h = auth(keys.acme)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw",
                                         timeout=120) as c:
                async def ask(doc_id: str) -> dict[str, Any]:
                    r = await c.post(f"/v1/documents/{doc_id}/questions", headers=h, json=QUESTION)
                    assert r.status_code == 200, r.text
                    return dict(r.json())

                doc = (await c.post("/v1/documents", headers=h, json={"title": "Rules", "text": TEXT})).json()
                other = await c.post(f"/v1/documents/{doc['id']}/questions", headers=h,
                                     json={"question": "Which exposure?", "max_tokens": 4})
                assert other.status_code == 200, other.text  # its question's blocks: cached, leased, not read below
                await ask(doc["id"])
                baseline = await ask(doc["id"])  # the cache as the running question below will find it
                assert baseline["usage"]["cached_tokens"] > doc["num_tokens"] // 2
                assert baseline["usage"]["completion_tokens"] > 2  # still running after the two steps below
                keep = document_prefix(engine.tokenizer, "Rules", TEXT, "acme").keep_tokens // 16  # kept blocks
                assert 0 < keep < doc["num_tokens"] // 16 // 2

                hold.arm(2)  # its first step and one decode step, then it waits
                running = asyncio.create_task(ask(doc["id"]))
                assert await wait_for(hold.paused.is_set, timeout=30)
                before = engine.stats()
                assert before.used_blocks > doc["num_tokens"] // 16 and before.cached_blocks > 0
                r = await c.delete(f"/v1/documents/{doc['id']}", headers=h)
                assert r.status_code == 200, r.text
                # evicted while it runs: the other question's blocks are free, what it reads is still its own
                assert await wait_for(lambda: engine.stats().cached_blocks == 0)
                after = engine.stats()
                assert after.free_blocks == before.free_blocks + before.cached_blocks
                assert after.used_blocks == before.used_blocks and after.leased_blocks == 0
                hold.release()
                done = await running
                assert (done["answer"], done["finish_reason"]) == (baseline["answer"], baseline["finish_reason"])
                assert done["usage"] == baseline["usage"]

                def all_free() -> bool:
                    s = engine.stats()
                    return s.free_blocks == s.num_blocks - keep and s.leased_blocks == keep and s.used_blocks == 0

                assert await wait_for(all_free)  # its blocks freed, not cached, when it finished
                again = (await c.post("/v1/documents", headers=h, json={"title": "Rules", "text": TEXT})).json()
                assert (await ask(again["id"]))["usage"]["cached_tokens"] == keep * 16  # a cache miss but the head
    finally:
        engine.shutdown()
