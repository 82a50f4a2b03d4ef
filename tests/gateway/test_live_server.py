"""Through a real uvicorn server on 127.0.0.1: the official openai client, and client disconnects."""
from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from sqlalchemy import select

from core.db.models import RequestLedger
from engine.client import LocalEngineClient
from tests.gateway.conftest import Keys, LiveServer, auth, wait_for


def test_official_openai_client_works_unchanged(live_server: LiveServer, keys: Keys) -> None:
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=keys.acme, max_retries=0)
    model = client.models.list().data[0].id

    done = client.completions.create(model=model, prompt="Credit spread", max_tokens=4, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 4

    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=3, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.role == "assistant"
    assert chat.usage is not None and chat.usage.prompt_tokens_details.cached_tokens is not None

    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=5, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(text, str)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5

    try:
        client.completions.create(model=model, prompt="x", best_of=3)
    except openai.BadRequestError as exc:
        assert exc.status_code == 400
        assert exc.body["code"] == "unsupported_parameter"  # the SDK unwraps {"error": {...}}
    else:
        raise AssertionError("best_of=3 must be refused")


def _idle(client: LocalEngineClient) -> bool:
    stats = client.stats()
    return stats.running == 0 and stats.waiting == 0 and stats.used_blocks == 0


async def _ledger(server: LiveServer, key: str, rid: str) -> dict:
    async with httpx.AsyncClient(base_url=server.url) as c:
        r = await c.get(f"/v1/requests/{rid}", headers=auth(key))
        assert r.status_code == 200, r.text
        return r.json()


async def test_disconnect_mid_stream_aborts_the_engine_request(live_server: LiveServer, keys: Keys,
                                                               engine_client: LocalEngineClient) -> None:
    async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as c:
        async with c.stream("POST", "/v1/completions", headers=auth(keys.acme),
                            json={"prompt": "Stress scenario", "max_tokens": 512, "ignore_eos": True,
                                  "stream": True}) as r:
            assert r.status_code == 200
            rid = r.headers["x-request-id"]
            async for _ in r.aiter_bytes():
                break  # first chunk arrived; now hang up
    assert await wait_for(lambda: _idle(engine_client)), engine_client.stats()
    rec = await _ledger(live_server, keys.acme, rid)
    assert rec["status"] == "aborted" and rec["http_status"] == 499
    assert 1 <= rec["tokens"]["output"] < 512


@pytest.mark.timing
async def test_disconnect_while_waiting_for_a_whole_answer_aborts_too(live_server: LiveServer, keys: Keys,
                                                                      engine_client: LocalEngineClient) -> None:
    async with httpx.AsyncClient(base_url=live_server.url, timeout=0.3) as c:
        t0 = time.monotonic()
        try:
            await c.post("/v1/completions", headers=auth(keys.acme),
                         json={"prompt": "Stress scenario", "max_tokens": 512, "ignore_eos": True})
        except httpx.ReadTimeout:
            pass
    assert await wait_for(lambda: _idle(engine_client)), engine_client.stats()
    assert time.monotonic() - t0 < 5
    state = live_server.state
    await asyncio.to_thread(state.ledger.flush)
    with state.sessions() as s:
        row = s.scalars(select(RequestLedger).where(RequestLedger.tenant == "acme")
                        .order_by(RequestLedger.arrival_at.desc())).first()
    assert row is not None and row.status == "aborted" and row.output_tokens < 512


async def test_clients_that_hang_up_at_once_leave_the_ledger_writer_serving(live_server: LiveServer, keys: Keys,
                                                                             engine_client: LocalEngineClient) -> None:
    """Hang-ups during the write-ahead wait (a killed job worker does this) used to cancel the row's future
    and kill the writer thread; every later request then waited on its row until the client timed out."""
    async def hang_up(timeout: float) -> None:
        async with httpx.AsyncClient(base_url=live_server.url, timeout=timeout) as c:
            try:
                await c.post("/v1/completions", headers=auth(keys.acme),
                             json={"prompt": "Stress scenario", "max_tokens": 64, "ignore_eos": True})
            except httpx.TimeoutException:
                pass

    await asyncio.gather(*(hang_up(0.002 * (i % 10 + 1)) for i in range(30)))
    assert await wait_for(lambda: _idle(engine_client)), engine_client.stats()
    async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as c:
        r = await c.post("/v1/completions", headers=auth(keys.acme),
                         json={"prompt": "Still serving?", "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200, r.text
    stats = live_server.state.ledger.stats()
    assert stats["alive"] and stats["cycle_failures"] == 0 and stats["lost"] == 0


def _request_lines(logs: list[dict], rid: str) -> list[dict]:
    return [e for e in logs if e.get("event") == "request" and e.get("request_id") == rid]


async def test_a_completed_stream_is_not_logged_as_a_disconnect(live_server: LiveServer, keys: Keys) -> None:
    """curl reads a stream to its end and closes: the client did not leave early. Every such request was logged
    `client_disconnected: true` (the server's disconnect message after the last byte was taken for a hang-up)."""
    from structlog.contextvars import merge_contextvars
    from structlog.testing import capture_logs

    with capture_logs(processors=[merge_contextvars]) as logs:
        rids = []
        for _ in range(3):
            async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as c:
                async with c.stream("POST", "/v1/completions", headers=auth(keys.acme),
                                    json={"prompt": "Credit spread", "max_tokens": 4, "ignore_eos": True,
                                          "stream": True}) as r:
                    body = b"".join([chunk async for chunk in r.aiter_bytes()])
                    rids.append(r.headers["x-finserve-request-id"])
            assert body.endswith(b"data: [DONE]\n\n")
        assert await wait_for(lambda: all(_request_lines(logs, rid) for rid in rids))
    lines = [line for rid in rids for line in _request_lines(logs, rid)]
    assert len(lines) == 3 and all(line["status"] == 200 for line in lines)
    assert [line.get("client_disconnected", False) for line in lines] == [False] * 3


async def test_a_stream_left_early_is_logged_as_a_disconnect(live_server: LiveServer, keys: Keys,
                                                            engine_client: LocalEngineClient) -> None:
    from structlog.contextvars import merge_contextvars
    from structlog.testing import capture_logs

    with capture_logs(processors=[merge_contextvars]) as logs:
        async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as c:
            async with c.stream("POST", "/v1/completions", headers=auth(keys.acme),
                                json={"prompt": "Stress scenario", "max_tokens": 512, "ignore_eos": True,
                                      "stream": True}) as r:
                rid = r.headers["x-finserve-request-id"]
                async for _ in r.aiter_bytes():
                    break
        assert await wait_for(lambda: bool(_request_lines(logs, rid)))
    assert _request_lines(logs, rid)[0]["client_disconnected"] is True
    assert await wait_for(lambda: _idle(engine_client)), engine_client.stats()
