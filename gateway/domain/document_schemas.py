"""/v1/documents: register a document, then ask questions about it (`document_qa`)."""
from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from core.web.text import EdgeModel, StoredStr
from gateway.schemas.common import MaxTokens, Temperature, Timings, Usage


class DocumentCreate(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "stream": 0 is not a bool (as on the OpenAI routes)

    text: StoredStr = Field(min_length=1)
    title: StoredStr = Field("", max_length=512)


class DocumentPublic(BaseModel):
    id: str
    title: str
    num_tokens: int = Field(description="Tokens of the document text alone (the question template adds a few).")
    created_at: datetime


class DocumentList(BaseModel):
    object: str = "list"
    data: list[DocumentPublic] = Field(description="The tenant's documents, newest first.")
    has_more: bool = Field(description="More documents are older than the last one listed (pass its id as `after`).")


class DocumentDeleted(BaseModel):
    id: str
    object: str = "document.deleted"
    deleted: bool = True


class QuestionCreate(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "stream": 0 is not a bool (as on the OpenAI routes)

    question: str = Field(min_length=1, max_length=4000)
    max_tokens: MaxTokens | None = Field(None, description="Default: the gateway's question_max_tokens setting.")
    temperature: Temperature = 0.0
    stream: bool = False
    quotes: bool = Field(False, description="Answer with verbatim sentences of the document that support it "
                                            "(each with its character offsets).")


class Quote(BaseModel):
    text: str = Field(description="A sentence of the document, verbatim.")
    start: int = Field(description="Character offset of its first character in the document text.")
    end: int = Field(description="Offset just past its last character: text == document[start:end].")


class Answer(BaseModel):
    request_id: str
    document_id: str
    workload_class: str
    answer: str = Field(description="Every figure in it occurs in the quoted sentences (without quotes: in the "
                                    "document); \"Not found in the document.\" when the document does not hold "
                                    "what was asked, or the model's answer held a figure the evidence does not.")
    quotes: list[Quote] | None = Field(None, description="With quotes=true: the supporting sentences (none when "
                                                         "not found); null otherwise, when the answer was cut "
                                                         "before its quotes closed, or when no sentence of the "
                                                         "document can be written in the model's tokens (then "
                                                         "the answer is plain).")
    grounded: bool = Field(description="false when the answer is \"Not found in the document.\"")
    finish_reason: str
    usage: Usage
    timings: Timings
