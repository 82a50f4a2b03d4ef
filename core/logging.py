"""structlog setup (the only place logging is configured) and the canonical request line.

`merge_contextvars` runs first, so a request id bound with `bind_contextvars` appears on
every line logged while the request is served, engine and ledger included. Output is JSON
unless stderr is a terminal. One line per request (`event="request"`) carries the request
id, tenant, class, outcome, token counts and timings; prompt and answer text are never logged.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from core.web.context import RequestContext

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time of each record (test runners and daemons swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(*, json: bool | None = None, level: str = "info") -> None:
    """Configure structlog and route stdlib logging (uvicorn, alembic) through the same renderer."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    lvl = _LEVELS.get(level.lower(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: one log line per request costs microseconds either way, and an uncached logger
        # follows a later reconfiguration (a test capturing logs, a command changing the level).
        cache_logger_on_first_use=False,
    )
    handler = _StderrHandler()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        # A library's record logged with exc_info (Celery's "Unrecoverable error") keeps its traceback as text.
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    # Python warnings (a library's deprecation, Celery's "running as root") become WARNING lines in the
    # same format instead of raw text on stderr.
    logging.captureWarnings(True)
    # uvicorn's access log would be a second line per request; the canonical line replaces it.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def canonical_fields(ctx: RequestContext, status: int | None) -> dict[str, Any]:
    """The fields of the one line logged per request (request_id comes from contextvars)."""
    out: dict[str, Any] = {
        "method": ctx.method,
        "path": ctx.path,
        "status": status,
        "duration_ms": round(ctx.elapsed_ms(), 3),
    }
    for key in ("tenant", "workload_class", "classification_rule", "outcome", "error_code"):
        value = getattr(ctx, key)
        if value is not None:
            out[key] = value
    out.update(ctx.fields)
    return out
