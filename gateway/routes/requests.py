"""GET /v1/requests/{request_id}: a request's ledger record, visible to its own tenant only;
GET /v1/requests?client_request_id=...: the tenant's records carrying the client's own X-Request-Id."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from core.db.models import RequestLedger
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES
from gateway.deps import StateDep, TenantDep, run_db
from gateway.schemas.requests import RequestList, RequestRecord

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


@router.get("/requests", response_model=RequestList, responses=ERROR_RESPONSES)
async def find_requests(key: TenantDep, state: StateDep,
                        client_request_id: Annotated[str, Query(min_length=1, max_length=128,
                                                                description="The X-Request-Id the client sent.")],
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> RequestList:
    """Newest first; one client id may name several requests (retries, `n` choices)."""
    def load(session: Session) -> list[RequestLedger]:
        return list(session.scalars(select(RequestLedger).where(
            RequestLedger.tenant == key.tenant, RequestLedger.client_request_id == client_request_id)
            .order_by(RequestLedger.arrival_at.desc(), RequestLedger.request_id).limit(limit)))

    await run_in_threadpool(state.ledger.flush, FLUSH_WAIT_S)  # rows of requests that just ended
    return RequestList(data=[RequestRecord.of(r) for r in await run_db(state, load)])
