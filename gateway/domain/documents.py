"""Documents: register text once (SQL, tenant-scoped), then ask `document_qa` questions about it.

A question's prompt is the document first and the question last (gateway/domain/prompts.py), and
the tenant is the prefix-cache salt, so a tenant's later questions on a document reuse its
KV blocks and only prefill the question. Another tenant's document id answers 404.

Each question asks the engine (or, with replicas, the replica its document is routed to) to keep
its prompt's KV blocks leased for the class's `kv_lease_s` (policy) after it finishes, renewed by
every question: a burst of bulk work cannot evict a document an analyst is still asking about.
Registering computes no KV (that would cost a whole prefill on a replica the document may not be
routed to yet), so the lease starts with the first question.

Every route checks the key's classes as a question would be (the class serving documents): a key limited to
other classes (`realtime_risk` only, say) gets 403 `class_forbidden` on list, read and delete as on register.

`GET /v1/documents` lists the tenant's documents (newest first, `limit` and `after` as OpenAI's lists
page), `DELETE /v1/documents/{id}` removes one (its questions' ledger rows stay: the ledger is an
audit record) and frees its KV at once: the engine ends its leases and evicts its cached blocks, and
those of its questions, from the prefix cache (gateway/domain/document_cache.py); a question still running
on it keeps its blocks until it finishes. The blocks were salted with the tenant all along, so no
other tenant could reach them.
"""
from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import Response
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from core.db.models import Document
from core.keys import KeyInfo
from core.web.context import get_context
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, STREAMING_RESPONSES
from engine.request import SamplingParams
from gateway.deps import ServiceDep, SettingsDep, StateDep, TenantDep, run_db
from gateway.domain.answer_stream import answer_events
from gateway.domain.document_answer import prepare_question
from gateway.domain.document_cache import evict_document, shared_prefix_tokens
from gateway.domain.document_schemas import (
    Answer,
    DocumentCreate,
    DocumentDeleted,
    DocumentList,
    DocumentPublic,
    QuestionCreate,
)
from gateway.inference.inputs import InferenceInput, Prompt
from gateway.schemas.common import Timings, Usage, WorkloadClassHeader
from gateway.streaming import EventStreamResponse, cancel_on_disconnect

router = APIRouter(tags=["documents"])
ROUTE = "documents"  # policy route name


def _public(doc: Document) -> DocumentPublic:
    return DocumentPublic(id=doc.id, title=doc.title, num_tokens=doc.token_count, created_at=doc.created_at)


def _check_class(service: ServiceDep, key: KeyInfo) -> None:
    """403 unless `key` may use the class the documents route serves (a route class decides before any prompt
    exists, so no token count is needed)."""
    refusal = service.forbidden(key, service.classify(key, route=ROUTE, explicit=None, input_tokens=0), ROUTE)
    if refusal is not None:
        raise refusal


async def _load(state: StateDep, key: KeyInfo, document_id: str) -> Document:
    def get(session: Session) -> Document | None:
        doc = session.get(Document, document_id)
        return doc if doc is not None and doc.tenant == key.tenant else None

    doc = await run_db(state, get)
    if doc is None:  # another tenant's document is as unknown as a missing one
        raise APIError("document_not_found", f"no document {document_id!r}")
    return doc


@router.post("/documents", status_code=status.HTTP_201_CREATED, response_model=DocumentPublic,
             responses=ERROR_RESPONSES)
async def create_document(body: DocumentCreate, key: TenantDep, service: ServiceDep,
                          state: StateDep) -> DocumentPublic:
    try:
        num_tokens = await service.count_tokens(body.text)
    except APIError as exc:
        if exc.code != "prompt_too_long":
            raise
        raise APIError("document_too_long", exc.message) from None
    # The class its questions will run in, decided and checked as admission does for each of them.
    classified = service.classify(key, route=ROUTE, explicit=None, input_tokens=num_tokens)
    refusal = service.forbidden(key, classified, ROUTE)
    if refusal is not None:
        raise refusal
    cls = classified.cls
    if num_tokens > cls.max_input_tokens:
        raise APIError("document_too_long", f"document has {num_tokens} tokens; class {cls.name!r} accepts "
                       f"prompts up to {cls.max_input_tokens}")
    doc = Document(id=f"doc-{uuid.uuid4().hex}", tenant=key.tenant, title=body.title, text=body.text,
                   token_count=num_tokens)

    def insert(session: Session) -> Document:
        session.add(doc)
        session.commit()
        return doc

    return _public(await run_db(state, insert))


@router.get("/documents/{document_id}", response_model=DocumentPublic, responses=ERROR_RESPONSES)
async def get_document(document_id: str, key: TenantDep, service: ServiceDep, state: StateDep) -> DocumentPublic:
    _check_class(service, key)
    return _public(await _load(state, key, document_id))


@router.get("/documents", response_model=DocumentList, responses=ERROR_RESPONSES)
async def list_documents(key: TenantDep, service: ServiceDep, state: StateDep, limit: Annotated[int, Query(ge=1, le=100)] = 20,
                         after: Annotated[str | None, Query(max_length=64, description="List documents older than "
                                                            "this one (the last id of the previous page).")] = None,
                         ) -> DocumentList:
    _check_class(service, key)

    def load(session: Session) -> list[Document]:
        stmt = select(Document).where(Document.tenant == key.tenant)
        if after is not None:
            cursor = session.get(Document, after)
            if cursor is None or cursor.tenant != key.tenant:
                raise APIError("document_not_found", f"no document {after!r}", param="after")
            stmt = stmt.where(tuple_(Document.created_at, Document.id) < tuple_(cursor.created_at, cursor.id))
        order = (Document.created_at.desc(), Document.id.desc())
        return list(session.scalars(stmt.order_by(*order).limit(limit + 1)))

    docs = await run_db(state, load)
    return DocumentList(data=[_public(d) for d in docs[:limit]], has_more=len(docs) > limit)


@router.delete("/documents/{document_id}", response_model=DocumentDeleted, responses=ERROR_RESPONSES)
async def delete_document(document_id: str, request: Request, key: TenantDep, service: ServiceDep,
                          state: StateDep) -> DocumentDeleted:
    _check_class(service, key)

    def delete(session: Session) -> tuple[str, str] | None:
        doc = session.get(Document, document_id)
        if doc is None or doc.tenant != key.tenant:
            return None
        deleted = (doc.title, doc.text)
        session.delete(doc)
        session.commit()
        return deleted

    deleted = await run_db(state, delete)
    if deleted is None:  # another tenant's document is as unknown as a missing one
        raise APIError("document_not_found", f"no document {document_id!r}")
    evicted = await evict_document(state.engine_client, *deleted, key.tenant)
    if evicted is not None:
        get_context(request).fields.update(document_id=document_id, kv_blocks_evicted=evicted.blocks,
                                           kv_blocks_freed=evicted.freed, kv_blocks_held=evicted.held,
                                           kv_leases_ended=evicted.leases_ended)
    return DocumentDeleted(id=document_id)


@router.post("/documents/{document_id}/questions", response_model=Answer, responses=STREAMING_RESPONSES)
async def ask_question(document_id: str, body: QuestionCreate, request: Request, key: TenantDep,
                       service: ServiceDep, state: StateDep, settings: SettingsDep,
                       x_workload_class: WorkloadClassHeader = None) -> Answer | Response:
    """Code plans the answer (gateway/domain/answer_plan.py: the sentence and the figures it may state, or not
    found), the grammar holds the model to that plan, and gateway/domain/grounding.py checks what came out."""
    ctx = get_context(request)
    doc = await _load(state, key, document_id)
    # Encodes every candidate sentence (only writable ones may be quoted): on the grammar executor.
    prepared = await service.state.grammar.run(key.tenant, prepare_question, doc.title, doc.text, body.question,
                                               quotes=body.quotes, tokenizer=service.tokenizer)
    adm = await service.prepare(ctx, key, InferenceInput(
        route=ROUTE, prompt=Prompt(messages=prepared.messages),
        sampling=functools.partial(SamplingParams, temperature=body.temperature, stop_repetition=True,
                                   json_schema=prepared.json_schema, regex=prepared.regex),
        # Forced quotes come on top of the answer's own budget, so they never cut it.
        max_tokens=body.max_tokens, default_max_tokens=settings.question_max_tokens + prepared.quote_tokens,
        explicit_class=x_workload_class, lease_prompt=True,
        log_fields={"document_id": doc.id, "answer_plan": prepared.plan.reason}))
    # Replicas route on the document, whatever the question's length (gateway/replicas/router.py).
    adm.request.affinity_tokens = await asyncio.to_thread(shared_prefix_tokens, service.tokenizer, doc.title, doc.text)

    def fields(text: str, reason: str | None) -> dict[str, Any]:
        checked = prepared.check(text, reason)
        return {"answer": checked.answer, "quotes": _offsets(doc.text, checked.quotes), "grounded": checked.grounded}

    if body.stream:
        return EventStreamResponse(answer_events(service.generate(adm), fields))
    done = await cancel_on_disconnect(request, service.collect(adm))
    return Answer(request_id=ctx.request_id, document_id=doc.id, workload_class=adm.cls.name,
                  **fields(done.text, done.finish_reason), finish_reason=done.finish_reason,
                  usage=Usage.of(done.metrics), timings=Timings.of(done.metrics))


def _offsets(document: str, quotes: list[str] | None) -> list[dict[str, Any]] | None:
    """Each quote with its offsets (its first occurrence: the grammar only admits sentences of the document)."""
    if quotes is None:
        return None
    found = ((q, document.find(q)) for q in quotes)
    return [{"text": q, "start": at, "end": at + len(q)} for q, at in found if at >= 0]
