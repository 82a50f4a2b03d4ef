"""Gathering a request's evidence on the request path, cheaply: the gateway's only two hooks.

    book.begin(request, cls, route=..., prompt=...)   once admitted: the input, if the class keeps evidence
    book.tap(request_id, outputs)                     wraps the engine's output stream: text, ids, logprobs
    book.note(request_id, event=...)                  a route's own facts (the risk route's structured event)

The ledger writer's `submit` pops the capture when the request's final row arrives and hands the row
its plain `Evidence`; hashing and encryption happen later, in the writer thread (ledger/evidence.py).
What is kept for a request (docs/OBSERVABILITY.md): input = route, class, the prompt as the client sent
it (text, chat messages or token ids), the prompt token ids the engine ran, every sampling parameter
(seed, schema / regex / choice, max_tokens as resolved), and on the risk route the event as the client sent
it; output = the text the client was sent, the
output token ids, their logprobs when asked, the finish reason and status.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from engine.outputs import RequestOutput
from engine.request import EngineRequest
from ledger.evidence import Evidence
from policies import ClassPolicy

STALE_S = 3600.0  # a capture whose request never got a final row (prepared, never run) is dropped after this
MAX_PENDING = 20_000


@dataclasses.dataclass
class Capture:
    input: dict[str, Any]
    retention_days: float
    started: float
    text: list[str] = dataclasses.field(default_factory=list)
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[list[Any]] | None = None

    def see(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        self.token_ids.extend(out.new_token_ids)
        if out.logprobs:
            lp = self.logprobs if self.logprobs is not None else []
            lp.extend([t.token_id, t.logprob, [list(p) for p in t.top]] for t in out.logprobs)
            self.logprobs = lp

    def evidence(self, status: str, finish_reason: str | None) -> Evidence:
        output = {"text": "".join(self.text), "token_ids": self.token_ids, "logprobs": self.logprobs,
                  "status": status, "finish_reason": finish_reason}
        return Evidence(input=self.input, output=output, retention_days=self.retention_days)


class EvidenceBook:
    """Captures of requests in flight, by request id (thread-safe: the writer pops from any thread)."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, Capture] = OrderedDict()
        self._lock = threading.Lock()
        # What decides the answer's bits besides the versions the row carries (batch invariance, kernel ISA,
        # K/V dtype): set by the gateway once its engine is loaded, kept in every input (`finserve ledger replay`).
        self.engine_fingerprint: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def begin(self, request: EngineRequest, cls: ClassPolicy, *, route: str, prompt: Any) -> None:
        """`prompt`: the prompt as the client sent it (a dataclass such as the gateway's Prompt, or a dict);
        copied only when the class keeps evidence."""
        if not cls.evidence:
            return
        now = time.monotonic()
        if dataclasses.is_dataclass(prompt) and not isinstance(prompt, type):
            prompt = dataclasses.asdict(prompt)
        sampling = dataclasses.asdict(request.sampling)
        cap = Capture(input={"route": route, "workload_class": cls.name, "prompt": prompt,
                             "prompt_token_ids": list(request.prompt_token_ids), "sampling": sampling,
                             "engine": self.engine_fingerprint},
                      retention_days=cls.evidence_retention_days, started=now)
        with self._lock:
            self._pending[request.request_id] = cap
            while self._pending:
                oldest = next(iter(self._pending.values()))
                if now - oldest.started < STALE_S and len(self._pending) <= MAX_PENDING:
                    break
                self._pending.popitem(last=False)

    def note(self, request_id: str, **fields: Any) -> None:
        """Add route-level facts to a captured input (the risk route's structured `event`); no-op without one."""
        cap = self._pending.get(request_id)
        if cap is not None:
            cap.input.update(fields)

    def get(self, request_id: str) -> Capture | None:
        return self._pending.get(request_id)

    def pop(self, request_id: str) -> Capture | None:
        with self._lock:
            return self._pending.pop(request_id, None)

    async def tap(self, request_id: str, outputs: AsyncIterator[RequestOutput]) -> AsyncGenerator[RequestOutput, None]:
        """`outputs`, each one seen by the request's capture (if it has one); closing this closes `outputs`."""
        async with aclosing(outputs) as inner:  # type: ignore[type-var]
            cap = self._pending.get(request_id)
            async for out in inner:
                if cap is not None:
                    cap.see(out)
                yield out
