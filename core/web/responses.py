"""OpenAPI descriptions of the error responses routes can give (all share the ErrorBody shape)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    code: str
    message: str
    request_id: str | None


class ErrorBody(BaseModel):
    """Every 4xx/5xx has this body; codes are listed in docs/ERRORS.md."""

    error: ErrorDetail


_DESCRIPTIONS = {
    400: "Invalid request (see docs/ERRORS.md for the code)",
    401: "Missing or unknown API key",
    403: "The key may not use this class or endpoint",
    404: "Unknown model, document or request (other tenants' ids are unknown too)",
    413: "Prompt or body over a limit",
    429: "Rate limit or class queue full; see Retry-After",
    503: "Engine not ready or database unavailable",
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DESCRIPTIONS.items()
}
