"""Prompt lookup: the continuation of the latest earlier occurrence of a request's last n tokens.

An answer that quotes its document, or an extraction record whose values are spans of the contract, repeats
runs of the prompt: after the first tokens of such a span, the tokens that followed them in the prompt are a
good guess at what comes next. The index maps every n-gram (n in [n_min, n_max]) of the request's tokens
(prompt, then output) to the position just past its latest occurrence that has a token after it; it is built
once and extended by the tokens each step appends, never rescanned. A lookup tries the longest n first.
"""
from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    def __init__(self, n_min: int, n_max: int) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"n-gram sizes need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []  # the request's tokens seen so far, in order
        # n -> n-gram -> the position just past its latest occurrence (the index of the token that followed it)
        self._last: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(n_min, n_max + 1)}

    def extend(self, new_tokens: Sequence[int]) -> None:
        """Appends the request's next tokens; indexes the n-grams that now have a token after them."""
        start = len(self.tokens)
        self.tokens.extend(new_tokens)
        toks = self.tokens
        for end in range(max(start, 1), len(toks)):  # an n-gram ending at `end` (exclusive) is followed by toks[end]
            for n, last in self._last.items():
                if end >= n:
                    last[tuple(toks[end - n:end])] = end

    def propose(self, k: int, extra: Sequence[int] = ()) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the last n tokens of the sequence
        (followed by `extra`, tokens not indexed: a draft so far), for the largest n that occurs; [] if none."""
        if k <= 0:
            return []
        tail = (self.tokens[-self.n_max:] + list(extra))[-self.n_max:]
        for n in range(min(self.n_max, len(tail)), self.n_min - 1, -1):
            end = self._last[n].get(tuple(tail[-n:]))
            if end is not None:
                return self.tokens[end:end + k]
        return []
