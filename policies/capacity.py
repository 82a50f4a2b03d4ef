"""Cross-checks of a loaded policy against the model and engine it will run on.

The loader validates what a policy file says on its own; these checks need numbers only the
engine knows at start-up (the model's context, the KV pool, the step budget), so the engine
calls `check_against_model` once it has them. A policy that passes can serve a request at
every class's limits; one that fails would refuse such requests at run time instead.
"""
from __future__ import annotations

import math

from policies.errors import PolicyError
from policies.model import ClassPolicy, Policy


def check_against_model(
    policy: Policy,
    *,
    max_model_len: int,
    kv_cache_tokens: int | None = None,
    block_size: int = 1,
    max_num_batched_tokens: int | None = None,
) -> None:
    """Raises PolicyError naming the class and key of the first limit the model or pool cannot meet.

    max_model_len: the context the engine serves (prompt + output tokens of one request).
    kv_cache_tokens: size of the KV pool in tokens (num_blocks * block_size); None skips the KV checks.
    block_size: tokens per KV block; shares are applied to whole blocks, as the engine does.
    max_num_batched_tokens: the step token budget; None skips the step-share check.
    """
    for c in policy.by_priority:
        _check_context(policy, c, max_model_len)
    if kv_cache_tokens is not None:
        num_blocks = kv_cache_tokens // block_size
        for c in policy.by_priority:
            _check_kv_min(policy, c, num_blocks)
            _check_kv_fits_one_request(policy, c, num_blocks, block_size)
    if max_num_batched_tokens is not None:
        for c in policy.by_priority:
            _check_step_share(policy, c, max_num_batched_tokens)


def _error(policy: Policy, c: ClassPolicy, key: str, problem: str) -> PolicyError:
    return PolicyError(problem, source=policy.source, key=f"classes.{c.name}.{key}")


def _check_context(policy: Policy, c: ClassPolicy, max_model_len: int) -> None:
    total = c.max_input_tokens + c.max_output_tokens
    if total > max_model_len:
        raise _error(policy, c, "max_input_tokens",
                     f"max_input_tokens {c.max_input_tokens} + max_output_tokens {c.max_output_tokens} = {total} "
                     f"exceeds the model's context of {max_model_len} tokens, so a request at both limits "
                     "could never be served")


def _check_kv_min(policy: Policy, c: ClassPolicy, num_blocks: int) -> None:
    if c.kv_min_share > 0 and int(c.kv_min_share * num_blocks) == 0:
        raise _error(policy, c, "kv_min_share",
                     f"{c.kv_min_share} of a {num_blocks}-block KV pool rounds down to no block, "
                     "so the class's guarantee is empty")


def _check_kv_fits_one_request(policy: Policy, c: ClassPolicy, num_blocks: int, block_size: int) -> None:
    # The last sampled token is never fed back, so its KV is never written (as engine/sched/admission.py counts).
    need = math.ceil((c.max_input_tokens + c.max_output_tokens - 1) / block_size)
    may_hold = min(int(c.kv_max_share * num_blocks), num_blocks)
    why = f"kv_max_share {c.kv_max_share} of {num_blocks} blocks"
    if not c.preemptible:
        # A non-preemptible class never borrows the other classes' guaranteed blocks.
        reserved = sum(int(o.kv_min_share * num_blocks) for o in policy.classes.values() if o is not c)
        if num_blocks - reserved < may_hold:
            may_hold, why = num_blocks - reserved, f"{num_blocks} blocks less {reserved} guaranteed to other classes"
    if need > may_hold:
        raise _error(policy, c, "kv_max_share",
                     f"one request at max_input_tokens + max_output_tokens needs {need} KV blocks of {block_size} "
                     f"tokens, but the class may hold only {may_hold} ({why})")


def _check_step_share(policy: Policy, c: ClassPolicy, max_num_batched_tokens: int) -> None:
    if c.step_token_share > 0 and int(c.step_token_share * max_num_batched_tokens) == 0:
        raise _error(policy, c, "step_token_share",
                     f"{c.step_token_share} of a {max_num_batched_tokens}-token step rounds down to no token, "
                     "so the class's reserve is empty")
