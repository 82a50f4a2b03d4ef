"""GET /v1/requests/{request_id}: a request's ledger record, visible to its own tenant only."""
from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from core.db.models import RequestLedger
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES
from gateway.deps import StateDep, TenantDep, run_db
from gateway.schemas.requests import RequestRecord

router = APIRouter(tags=["requests"])
FLUSH_WAIT_S = 2.0


@router.get("/requests/{request_id}", response_model=RequestRecord, responses=ERROR_RESPONSES)
async def get_request(request_id: str, key: TenantDep, state: StateDep) -> RequestRecord:
    def load(session: Session) -> RequestLedger | None:
        return session.scalar(select(RequestLedger).where(
            RequestLedger.request_id == request_id, RequestLedger.tenant == key.tenant))

    row = await run_db(state, load)
    if row is None:
        # Rows are written in batches off the request path; a request that just ended may still
        # be queued, so wait for the writer once before answering 404.
        await run_in_threadpool(state.ledger.flush, FLUSH_WAIT_S)
        row = await run_db(state, load)
    if row is None:  # another tenant's request is as unknown as a missing one
        raise APIError("request_not_found", f"no request {request_id!r}")
    return RequestRecord.of(row)
