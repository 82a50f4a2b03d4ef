"""Running an admitted request: its `running` row written ahead, the engine's outputs passed on, and the
final row recorded however it ends (answered, failed, refused by the engine, or left by the client)."""
from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from core.web.errors import APIError
from engine.outputs import AdmissionError, RequestOutput
from engine.protocol import EngineClient
from engine.request import RequestMetrics
from gateway import spans
from gateway.inference.errors import admission_error, raise_if_failed
from gateway.inference.inputs import Admitted
from gateway.inference.record import Recorder


@dataclass
class Completion:
    """A whole answer (non-streaming routes)."""

    text: str
    finish_reason: str
    metrics: RequestMetrics


class Runner:
    def __init__(self, client: EngineClient, recorder: Recorder) -> None:
        self.client = client
        self.recorder = recorder

    async def generate(self, adm: Admitted) -> AsyncGenerator[RequestOutput, None]:
        """The engine's outputs for `adm`. APIError before the first output if the engine refuses it.

        Closing or cancelling this iterator early (client disconnect) aborts the engine request.
        """
        req = adm.request
        last: RequestOutput | None = None
        rejected = False
        try:
            kept = await self.recorder.write_ahead(adm)
        except BaseException:
            self.recorder.ended(adm, None)  # the client left while the row was being written: aborted
            raise
        if not kept:
            raise self.recorder.reject(adm, APIError("database_unavailable", "the ledger can record no more "
                                                     "requests (database down and spool full); retry later",
                                                     retry_after_s=30.0))
        submitted = time.time()
        try:
            evidence = self.recorder.state.ledger.evidence  # taps the outputs of a class that keeps evidence
            async with aclosing(evidence.tap(req.request_id, self.client.generate(req))) as outputs:
                try:
                    first = await anext(outputs)
                except AdmissionError as exc:
                    rejected = True
                    spans.engine_phases(req, submitted, tenant=adm.key.tenant, refused=exc.reason)
                    err = self.recorder.reject(adm, admission_error(exc), reason=exc.reason)
                    await self.recorder.durable()
                    raise err from None
                last = first
                yield first
                if not first.finished:
                    async for out in outputs:
                        last = out
                        yield out
        except BaseException:
            if not rejected:
                self._finish(adm, last, submitted)  # the client left or something failed: no waiting here
            raise
        self._finish(adm, last, submitted)
        await self.recorder.durable()  # the answer's last word waits until its row is safe

    async def collect(self, adm: Admitted) -> Completion:
        """generate() gathered into one answer; a failed request raises its APIError."""
        parts: list[str] = []
        last: RequestOutput | None = None
        async with aclosing(self.generate(adm)) as outputs:
            async for out in outputs:
                parts.append(out.new_text)
                last = out
        assert last is not None and last.finished and last.metrics is not None
        raise_if_failed(last)
        return Completion("".join(parts), last.finish_reason or "stop", last.metrics)

    def _finish(self, adm: Admitted, last: RequestOutput | None, submitted: float) -> None:
        if last is None or not last.finished:
            # Idempotent; also covers a cancel that raced admission, before the client's
            # own iterator had taken charge of aborting.
            self.client.abort(adm.request.request_id)
        self.recorder.ended(adm, last)
        spans.engine_phases(adm.request, submitted, tenant=adm.key.tenant, replica=adm.ctx.fields.get("replica"))
