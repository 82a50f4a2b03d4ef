"""The engine loop's state of one request between its tokens: detokenizer, grammar, drafter, text."""
from __future__ import annotations

from dataclasses import dataclass

from engine.repetition import REPETITION, repeated_tail
from engine.request import EngineRequest
from engine.speculative.proposer import Drafter
from engine.structured import GrammarState
from engine.tokenizer import IncrementalDetokenizer


@dataclass
class Live:
    """Engine-side state of a request between its tokens."""

    req: EngineRequest
    detok: IncrementalDetokenizer
    grammar: GrammarState | None
    drafter: Drafter | None = None  # prompt lookup (engine/speculative/), when the request speculates
    text: str = ""
    emitted: int = 0  # characters of `text` already sent to the caller

    def cut_at_repetition(self) -> str | None:
        """"repetition" when the text has degenerated into a loop; cuts it after the loop's first span."""
        cut = repeated_tail(self.text)
        if cut is None:
            return None
        self.text = self.text[:cut]
        self.emitted = min(self.emitted, cut)
        return REPETITION

    def cut_at_stop_string(self, prev_len: int) -> str | None:
        """The earliest stop string completed by the text since `prev_len`; cuts the text before it."""
        stops = self.req.sampling.stop
        start = max(0, prev_len - max(len(s) for s in stops) + 1)
        hits = [(i, s) for s in stops if (i := self.text.find(s, start)) >= 0]
        if not hits:
            return None
        idx, stop = min(hits)
        self.text = self.text[:idx]
        self.emitted = min(self.emitted, idx)
        return stop
