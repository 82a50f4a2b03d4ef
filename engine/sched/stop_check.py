"""When a sampled token ends a request: the token-level stop rules the scheduler applies.

Text-level rules (stop strings, a completed grammar) need the detokenized text and stay in the
engine loop. Precedence for one token: stop token, then length, then the engine's text rules
(a request the token already finished keeps its reason; a stop string is still cut from its text).
"""
from __future__ import annotations

from engine.request import EngineRequest, RequestStatus, SamplingParams


def stop_token_ids(params: SamplingParams, eos_token_ids: tuple[int, ...]) -> tuple[int, ...]:
    """EOS ids (unless ignore_eos) followed by the request's own stop_token_ids."""
    return (() if params.ignore_eos else eos_token_ids) + params.stop_token_ids


def finish_status(
    req: EngineRequest, token: int, stop_ids: tuple[int, ...], max_model_len: int
) -> RequestStatus | None:
    """The finished status `token` (already appended to req.output_token_ids) gives `req`, if any.

    A stop token counts once min_tokens tokens precede it (the sampler masks stop ids until then,
    so an earlier one only slips through a fully masked row). Pure: the caller finishes.
    """
    p = req.sampling
    num_out = len(req.output_token_ids)
    if token in stop_ids and num_out > p.min_tokens:
        return RequestStatus.FINISHED_STOPPED
    if num_out >= p.max_tokens or req.num_tokens >= max_model_len:
        return RequestStatus.FINISHED_LENGTH
    return None
