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
from gateway.inference.errors import UNWRITABLE_OUTPUT, admission_error, raise_if_failed, unwritable_refusal
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
        An output ending the request because its grammar requires text the model cannot write is not yielded:
        it is recorded as a refusal (a 400, not counted against the SLO) and raised as that APIError.
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
                while True:
                    refusal = self._refused_late(adm, last, submitted)
                    if refusal is not None:
                        rejected = True
                        await self.recorder.durable()  # a refusal is an answer too: its row is safe first
                        raise refusal
                    yield last
                    if last.finished:
                        break
                    try:
                        last = await anext(outputs)
                    except StopAsyncIteration:
                        break
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

    def _refused_late(self, adm: Admitted, out: RequestOutput, submitted: float) -> APIError | None:
        """The recorded refusal of a request the engine ended for its grammar's unwritable text, or None."""
        refusal = unwritable_refusal(out, adm.request.sampling)
        if refusal is None:
            return None
        err = self.recorder.reject(adm, refusal, reason=UNWRITABLE_OUTPUT)
        spans.engine_phases(adm.request, submitted, tenant=adm.key.tenant, replica=adm.ctx.fields.get("replica"),
                            refused=UNWRITABLE_OUTPUT)
        return err
