"""A request's bookkeeping: its ledger rows, Prometheus metrics and canonical-log fields.

Each request leaves exactly one final ledger row (finished, failed, aborted, rejected or interrupted) once
it has a class; requests refused before classification (bad JSON, unknown class) leave none, because the
ledger and the reports are per class. The row is written ahead: an admitted request's `running` row is
durable (database or fsynced spool) before the engine sees it, and the final row replaces it; a whole
answer is sent, and a stream's `[DONE]`, only once the final row is durable too. So kill -9 at any moment
leaves every admitted request one row, `interrupted` at worst (docs/ERRORS.md). Every row is built by
ledger.row.row_from_outcome from the request's outcome, here.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

from core.db.models import RUNNING_STATUS
from core.web.context import RequestContext
from core.web.errors import CLIENT_CLOSED_STATUS, APIError
from engine.outputs import RequestOutput
from engine.protocol import EngineClient
from engine.request import RequestMetrics
from gateway import spans
from gateway.inference.errors import failed_status, openai_shape
from gateway.inference.inputs import Admitted
from gateway.state import GatewayState
from ledger.row import LedgerRow, OutcomeStage, RequestOutcome, row_from_outcome

# Ledger status -> the outcome label of the request metrics and the log line.
_OUTCOME_LABELS = {"finished": "finished", "failed": "error", "aborted": "aborted"}


class Recorder:
    """One request's rows and metrics (one per request, as the service is): `_ledgered` is its latest row."""

    def __init__(self, state: GatewayState, client: EngineClient) -> None:
        self.state = state
        self.client = client
        self._ledgered: Future[bool] | None = None  # durability of this request's latest ledger row

    def outcome(self, adm: Admitted, stage: OutcomeStage, *, http_status: int,
                rejection_reason: str | None = None) -> RequestOutcome:
        """`adm`'s outcome at `stage`; its placement (with engine replicas) goes with every final row."""
        extra = {"gateway": self.state.ledger.gateway_id} if stage == "running" else self._placement(adm)
        return RequestOutcome(stage=stage, request=adm.request, tenant=adm.key.tenant, class_rule=adm.rule,
                              route=adm.route, slo=adm.cls.slo, http_status=http_status, key_id=adm.key.key_id,
                              tokenize_start=adm.tokenize_start, tokenized=adm.tokenized,
                              rejection_reason=rejection_reason, timeline_extra=extra)

    def reject(self, adm: Admitted, err: APIError, reason: str | None = None) -> APIError:
        """Record a refused request (ledger, metrics, log) and return the error to raise."""
        reason = reason or err.code
        err = openai_shape(adm.route, err, self.client.engine.max_model_len)
        adm.ctx.outcome, adm.ctx.error_code = "rejected", err.code
        adm.ctx.fields["rejection_reason"] = reason
        self.state.metrics.observe_rejection(adm.cls.name, reason)
        self._submit(self.outcome(adm, "rejected", http_status=err.status, rejection_reason=reason), adm.ctx)
        return err

    async def write_ahead(self, adm: Admitted) -> bool:
        """The `running` row, durable before the engine sees the request; False if it can be kept nowhere."""
        self._submit(self.outcome(adm, "running", http_status=0), adm.ctx)
        return await self.durable()

    def ended(self, adm: Admitted, last: RequestOutput | None) -> None:
        """Ledger row, metrics and log fields of a request the engine admitted: ended by the engine, or left
        by its client first (the engine thread finishes that abort on its own time)."""
        req, ctx = adm.request, adm.ctx
        if last is not None and last.finished and req.status.finished:
            status = failed_status(req) if req.status.finish_reason == "error" else 200
            row = self._submit(self.outcome(adm, "ended", http_status=status), ctx)
            metrics = last.metrics or RequestMetrics.of(req)
        else:
            row = self._submit(self.outcome(adm, "left", http_status=CLIENT_CLOSED_STATUS), ctx)
            metrics = RequestMetrics.of(req)
        outcome = _OUTCOME_LABELS[row.status]
        self.state.metrics.observe_request(adm.cls.name, outcome, metrics, finish_reason=row.finish_reason)
        ctx.outcome = outcome
        ctx.fields.update(
            finish_reason=row.finish_reason, input_tokens=metrics.input_tokens, cached_tokens=metrics.cached_tokens,
            output_tokens=metrics.output_tokens, preemptions=metrics.preemptions,
            queue_ms=_r(metrics.queue_ms), ttft_ms=_r(metrics.ttft_ms), tpot_ms=_r(metrics.tpot_ms),
            e2e_ms=_r(metrics.e2e_ms), slo_met=row.slo_met,
        )

    async def durable(self) -> bool:
        """Wait until this request's latest row is in the database or the spool; False if it is in neither."""
        if self._ledgered is None:
            return True
        try:
            # A caller that goes away cancels this future; the writer settles only futures still open.
            await asyncio.wrap_future(self._ledgered)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False  # the writer has logged it and counted it as lost
        return True

    def _placement(self, adm: Admitted) -> dict[str, Any]:
        """With engine replicas: where the request went and why, for the ledger's timeline and the log line."""
        placed = self.client.pop_placement(adm.request.request_id)
        if placed is None:
            return {}
        adm.ctx.fields.update(replica=placed.replica, replica_reason=placed.reason)
        return {"replica": {"url": placed.replica, "reason": placed.reason, "tried": placed.tried}}

    def _submit(self, outcome: RequestOutcome, ctx: RequestContext) -> LedgerRow:
        row = row_from_outcome(outcome, now=time.time())
        row.client_request_id = ctx.client_request_id
        if row.status != RUNNING_STATUS:  # the SLI counts each final row as the ledger report does
            self.state.metrics.observe_slo(row.workload_class, row.slo_met)
        self._ledgered = self.state.ledger.submit(row)
        spans.ledger_write(self._ledgered, request_id=row.request_id, status=row.status)
        return row


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
