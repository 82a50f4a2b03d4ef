"""What the client is told when the inference path refuses or fails a request: one JSON error shape, one
code per reason (docs/ERRORS.md), OpenAI's shape on the OpenAI routes."""
from __future__ import annotations

from core.web.errors import ERROR_CODES, APIError
from engine.grammar_limits import LIMIT_CODES
from engine.grammar_pool import COMPILER_CODES
from engine.outputs import UNWRITABLE, AdmissionError, RequestOutput, is_unwritable
from engine.request import EngineRequest, SamplingParams
from engine.structured import constraint_kind
from gateway.replicas.client import REPLICA_LOST

# Engine admission reasons -> the error code clients see (the reason is kept in the ledger).
ADMISSION_CODES = {
    "prompt_too_long": "prompt_too_long",
    "context_overflow": "context_overflow",
    "max_tokens_too_large": "max_tokens_too_large",
    "exceeds_kv_budget": "exceeds_kv_budget",
    "queue_full": "queue_full",
    "tenant_queue_full": "queue_full",  # the tenant holds its share of the class queue (tenant_queue_share)
    "unknown_workload_class": "unknown_workload_class",
    "duplicate_request_id": "internal_error",  # the gateway makes ids unique; a duplicate is a bug
    "invalid_schema": "invalid_json_schema",
    "invalid_sampling": "invalid_request",
    "empty_prompt": "invalid_request",
    "invalid_token": "invalid_request",
    "engine_unavailable": "engine_not_ready",  # the loop is dead or shutting down: 503, not a full queue
    # A grammar limit, or the grammar child's death or time limit: the engine's reason is the code itself.
    **{code: code for code in (*LIMIT_CODES, *COMPILER_CODES)},
}

# The ledger's rejection_reason (and the rejections metric's reason) of a request the engine ended because its
# grammar requires text this model cannot write, found while decoding (engine.outputs.UnwritableOutput).
UNWRITABLE_OUTPUT = "unwritable_output"

# Output constraint kind -> the error code of a grammar llguidance cannot use.
GRAMMAR_CODES = {"json_schema": "invalid_json_schema", "regex": "invalid_regex", "choice": "invalid_choice"}

# Routes that answer a prompt that does not fit as OpenAI does: 400 context_length_exceeded (gateway/routes/openai.py).
OPENAI_ROUTES = {"completions": "prompt", "chat": "messages"}
_CONTEXT_CODES = frozenset({"prompt_too_long", "context_overflow"})


def openai_shape(route: str, err: APIError, max_model_len: int) -> APIError:
    """On an OpenAI route, a prompt that does not fit becomes OpenAI's 400 context_length_exceeded."""
    param = OPENAI_ROUTES.get(route)
    if param is None or err.code not in _CONTEXT_CODES:
        return err
    return APIError("context_length_exceeded", f"This model's maximum context length is {max_model_len} tokens; "
                    f"{err.message}. Please reduce the length of the {param} or max_tokens.", param=param)


def admission_error(exc: AdmissionError) -> APIError:
    """The client's error for an engine's admission refusal."""
    code = ADMISSION_CODES.get(exc.reason) or ("queue_full" if exc.retryable else "invalid_request")
    default_retry = {429: 1.0, 503: 5.0}.get(ERROR_CODES[code])
    retry = exc.retry_after_s if exc.retry_after_s is not None else default_retry
    return APIError(code, exc.message, retry_after_s=retry)


def raise_if_failed(out: RequestOutput) -> None:
    """A finished output that is not an answer becomes the client's error."""
    if out.finished and out.finish_reason == "error" and (out.error or "").startswith(REPLICA_LOST):
        raise APIError("engine_not_ready", out.error or REPLICA_LOST, retry_after_s=1.0)  # nothing wrong with it
    if out.finished and out.finish_reason == "error":
        raise APIError("engine_error", f"the engine failed this request: {out.error or 'unknown error'}")
    if out.finished and out.finish_reason == "abort":  # only an engine shutdown aborts a request we wait on
        raise APIError("engine_not_ready", "the engine shut down while serving this request", retry_after_s=5.0)


def failed_status(req: EngineRequest) -> int:
    """What raise_if_failed answers for a failed request (the ledger row says the same): 503 for a lost replica."""
    return 503 if (req.error or "").startswith(REPLICA_LOST) else 500


def unwritable_refusal(out: RequestOutput, p: SamplingParams) -> APIError | None:
    """The client's error for an output that ends its request with UnwritableOutput, None for any other.

    The cause is the client's grammar: what it requires after some output (a regex literal or a schema
    `pattern` after a choice) is text this model's vocabulary cannot write. The admission probe refuses the
    same cause when it shows in the first step; found later it is refused alike: 400 with the constraint's
    code (`invalid_regex`, `invalid_json_schema`, `invalid_choice`), never a 500 engine_error.
    """
    if not (out.finished and out.finish_reason == "error" and is_unwritable(out.error)):
        return None
    kind = constraint_kind(p) or "json_schema"  # a tool-call schema is a JSON schema too
    detail = (out.error or "")[len(UNWRITABLE):]
    return APIError(GRAMMAR_CODES[kind], f"output constraint ({kind}) is not usable: after the output so far it "
                    f"requires text that cannot be written in this model's tokens (a byte its vocabulary lacks, or "
                    f"a special token's text): {detail}")
