"""/v1/documents: register a document, then ask questions about it (`document_qa`)."""
from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from core.web.text import EdgeModel, StoredStr
from gateway.schemas.common import MaxTokens, Temperature, Timings, Usage


class DocumentCreate(EdgeModel):
    model_config = ConfigDict(extra="forbid")

    text: StoredStr = Field(min_length=1)
    title: StoredStr = Field("", max_length=512)


class DocumentPublic(BaseModel):
    id: str
    title: str
    num_tokens: int = Field(description="Tokens of the document text alone (the question template adds a few).")
    created_at: datetime


class QuestionCreate(EdgeModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    max_tokens: MaxTokens | None = Field(None, description="Default: the gateway's question_max_tokens setting.")
    temperature: Temperature = 0.0
    stream: bool = False


class Answer(BaseModel):
    request_id: str
    document_id: str
    workload_class: str
    answer: str
    finish_reason: str
    usage: Usage
    timings: Timings
