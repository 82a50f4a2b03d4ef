"""check_against_model refuses a policy whose limits the model's context or the KV pool cannot meet."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, check_against_model, load_policy

# The default set-up: SmolLM2-135M (8,192-token context), a 1 GiB fp32 KV pool = 1,456 blocks
# of 16 tokens (46,080 bytes of KV per token), a 256-token step.
CONTEXT, BLOCK, BLOCKS, STEP = 8192, 16, 1456, 256


def _set(changes: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        for cls, keys in changes.items():
            d["classes"][cls].update(keys)

    return mutate


def test_default_policy_fits_the_default_model_and_pool() -> None:
    check_against_model(load_policy(), max_model_len=CONTEXT, kv_cache_tokens=BLOCKS * BLOCK, block_size=BLOCK,
                        max_num_batched_tokens=STEP)


def test_input_limit_beyond_the_context_names_class_and_key(write_policy: Callable[..., Path]) -> None:
    path = write_policy(_set({"realtime_risk": {"max_input_tokens": 100000}}))
    policy = load_policy(path)  # valid on its own: the loader cannot know the model
    with pytest.raises(PolicyError) as err:
        check_against_model(policy, max_model_len=CONTEXT)
    assert (err.value.source, err.value.key) == (str(path), "classes.realtime_risk.max_input_tokens")
    assert "100000 + max_output_tokens 64 = 100064 exceeds the model's context of 8192" in str(err.value)


def test_input_plus_output_exactly_the_context_passes(write_policy: Callable[..., Path]) -> None:
    policy = load_policy(write_policy(_set({"document_qa": {"max_input_tokens": CONTEXT - 512}})))
    check_against_model(policy, max_model_len=CONTEXT)
    with pytest.raises(PolicyError, match="classes.document_qa.max_input_tokens"):
        check_against_model(policy, max_model_len=CONTEXT - 1)


def test_a_pool_too_small_for_one_full_request_of_a_class_fails_on_its_kv_max_share() -> None:
    # 512 blocks: document_qa may hold 0.7 x 512 = 358 blocks; 6,144 + 512 - 1 tokens need 416.
    with pytest.raises(PolicyError) as err:
        check_against_model(load_policy(), max_model_len=CONTEXT, kv_cache_tokens=512 * BLOCK, block_size=BLOCK)
    assert err.value.key == "classes.document_qa.kv_max_share"
    assert "needs 416 KV blocks of 16 tokens, but the class may hold only 358" in str(err.value)


def test_a_non_preemptible_class_cannot_count_on_blocks_guaranteed_to_others(
    write_policy: Callable[..., Path]
) -> None:
    # document_qa may hold 0.9 of the pool by its cap, but realtime_risk (0.1) and bulk (0.3) are
    # guaranteed theirs and document_qa never preempts them: 650 - 65 - 195 = 390 < 416 blocks.
    policy = load_policy(write_policy(_set({"document_qa": {"kv_max_share": 0.9},
                                            "bulk_extraction": {"kv_min_share": 0.3}})))
    with pytest.raises(PolicyError) as err:
        check_against_model(policy, max_model_len=CONTEXT, kv_cache_tokens=650 * BLOCK, block_size=BLOCK)
    assert err.value.key == "classes.document_qa.kv_max_share"
    assert "only 390 (650 blocks less 260 guaranteed to other classes)" in str(err.value)


def test_a_guarantee_that_rounds_to_no_block_fails() -> None:
    with pytest.raises(PolicyError) as err:
        check_against_model(load_policy(), max_model_len=CONTEXT, kv_cache_tokens=9 * BLOCK, block_size=BLOCK)
    assert err.value.key == "classes.realtime_risk.kv_min_share"
    assert "rounds down to no block" in str(err.value)


def test_a_step_reserve_that_rounds_to_no_token_fails() -> None:
    with pytest.raises(PolicyError) as err:
        check_against_model(load_policy(), max_model_len=CONTEXT, max_num_batched_tokens=3)
    assert err.value.key == "classes.realtime_risk.step_token_share"
    assert "0.25 of a 3-token step rounds down to no token" in str(err.value)
