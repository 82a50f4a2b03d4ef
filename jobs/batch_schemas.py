"""HTTP shapes of the OpenAI Files and Batch API (openai.types.FileObject, Batch), pydantic only at the edge."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from core.web.text import EdgeModel, StoredStr
from jobs.schemas import QueueWarning

MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=64)]
MetadataValue = Annotated[StoredStr, StringConstraints(max_length=512)]


class BatchCreate(EdgeModel):
    """`POST /v1/batches`: OpenAI's body. `output_expires_after` is not supported (outputs are kept)."""

    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(min_length=1, max_length=40)
    endpoint: Literal["/v1/chat/completions", "/v1/completions"]
    completion_window: Literal["24h"]
    metadata: dict[MetadataKey, MetadataValue] | None = Field(None, max_length=16)


class FileUpload(BaseModel):
    """`POST /v1/files` as multipart/form-data (documents the form; the route reads it itself)."""

    file: bytes = Field(json_schema_extra={"format": "binary"})  # JSONL: {custom_id, method, url, body} per line
    purpose: Literal["batch"]


class FilePublic(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"] = "processed"
    status_details: str | None = None
    expires_at: int | None = None


class RequestCounts(BaseModel):
    total: int
    completed: int  # lines answered 2xx (in the output file)
    failed: int  # lines in the error file: refused, out of retries, or cancelled before they ran


class BatchPublic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: Any = None
    input_file_id: str
    completion_window: str
    status: Literal["in_progress", "completed", "cancelling", "cancelled"]
    output_file_id: str | None  # set once the batch is finished
    error_file_id: str | None  # set once the batch is finished, if any line failed
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None
    workload_class: str | None  # finserve: the class every line runs in
    warning: QueueWarning | None = None  # finserve: while unfinished and nothing consumes the queue


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FilePublic]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchPublic]
    first_id: str | None
    last_id: str | None
    has_more: bool
