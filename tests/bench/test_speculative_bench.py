"""bench/speculative.py on the tiny model: the modes it compares, and that "plain" decodes every token."""
from __future__ import annotations

from pathlib import Path

from bench.speculative import run


def test_plain_decoding_takes_a_model_step_for_every_token_the_other_modes_jump_over(tiny_model_dir: Path) -> None:
    data = run(None, model=str(tiny_model_dir), threads=1, reps=1, generated_items=2, max_tokens=12,
               parts=("extraction",), limit=lambda w: w[:2])  # documents: longer than the tiny model's context
    parts = list(data["extraction"].values())
    for part in parts:
        assert set(part["model_steps"]) == {"auto", "off", "plain"}
        assert part["on_over_plain"] > 0 and part["off_over_plain"] > 0
        # plain: one token per step (decode) plus the prefill steps; jump-forward takes grammar-forced tokens free
        assert part["model_steps"]["plain"][0] >= part["output_tokens"]["plain"][0] // 2
    # the schema forces keys and punctuation: with jump-forward the same requests need fewer model steps
    assert sum(p["model_steps"]["plain"][0] for p in parts) > sum(p["model_steps"]["off"][0] for p in parts)
