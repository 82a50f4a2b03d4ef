"""A draft: tokens proposed to follow a request's known tokens, verified by the step that computes them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Draft:
    """`token_ids[i]` is proposed at position num_tokens + i of its request (num_tokens when it was drafted).

    `forced[i]`: the request's grammar allows only that token after the ones before it (jump-forward inside the
    draft). A forced token is accepted whenever every draft token before it is, without a model row deciding it,
    exactly as jump-forward takes it after a sampled token; the others are accepted by the rule in
    engine/speculative/verify.py.
    """

    token_ids: tuple[int, ...]
    forced: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.forced) != len(self.token_ids):
            raise ValueError("a draft needs one forced flag per token")

    def __len__(self) -> int:
        return len(self.token_ids)

    def head(self, n: int) -> Draft:
        """The first `n` tokens (what a step's token budget or the KV pool left room for)."""
        return Draft(self.token_ids[:n], self.forced[:n])

    @classmethod
    def of(cls, token_ids: list[int], forced: list[bool] | None = None) -> Draft:
        return cls(tuple(token_ids), tuple(forced) if forced is not None else (False,) * len(token_ids))
