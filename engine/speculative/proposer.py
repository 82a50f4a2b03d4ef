"""One request's drafts: prompt lookup (ngram.py), cut where its grammar refuses, under its class's policy.

The engine asks for a draft for every running request just before each schedule (`Drafter.draft`); the
scheduler takes as much of it as the step's token budget and the KV pool leave room for (none at all rather
than preempting anyone), and the model runner verifies it (verify.py).

With a grammar, each proposed token is checked on a copy of the request's grammar state and the draft ends at
the first one it refuses or once the document is complete. After a token, the tokens the grammar forces
(jump-forward, as the engine appends them after a sampled token) go into the draft marked forced, and the
lookup continues from the tail they leave; a forced run that does not fit the draft's length ends the draft
before the token that led to it, so the draft never stops where jump-forward would have gone on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.request import EngineRequest, SamplingParams
from engine.speculative.draft import Draft
from engine.speculative.ngram import NgramIndex
from policies.model import Speculation

if TYPE_CHECKING:
    from engine.structured import GrammarState


MAX_BACKOFF = 16  # most steps a request goes without a draft after its one-token drafts are refused


def drafts_for(params: SamplingParams, policy: Speculation, mode: str) -> bool:
    """Whether a request with these parameters speculates: the engine's mode (EngineConfig.speculative), its
    class's policy (random sampling only where `policy.sampled`), and never for seeded random sampling, whose
    tokens must be the same alone or batched (docs/DETERMINISM.md): whether a step drafts depends on the batch,
    and verification draws otherwise."""
    return mode == "auto" and policy.enabled and (params.greedy or (policy.sampled and params.seed is None))


class Drafter:
    def __init__(self, policy: Speculation, *, max_model_len: int, fast_forward: bool) -> None:
        self.policy = policy
        self.max_model_len = max_model_len
        self.fast_forward = fast_forward
        self.index = NgramIndex(policy.ngram_min, policy.ngram_max)
        # The draft length adapts to how the request's drafts fare, as transformers' assisted generation does:
        # +2 after a draft accepted whole, -1 after one that was not, within [1, max_draft]; a quote grows its
        # drafts within a few steps. A one-token draft refused outright backs off: no draft for the next 1, 2,
        # 4 .. MAX_BACKOFF steps (reset by a draft accepted whole), so text that does not copy its prompt (or
        # sampling that rarely takes the copied token) pays a verification row only every few steps.
        self.length = policy.max_draft
        self._counted = (0, 0)  # the request's (draft, accepted) tokens when it was last drafted for
        self._backoff = 0  # steps the next refused one-token draft skips
        self._idle = 0  # steps left without a draft

    def _adapt(self, req: EngineRequest) -> None:
        drafted = req.num_draft_tokens - self._counted[0]
        accepted = req.num_accepted_tokens - self._counted[1]
        self._counted = (req.num_draft_tokens, req.num_accepted_tokens)
        if not drafted:
            return
        if accepted >= drafted:
            self.length, self._backoff = min(self.policy.max_draft, self.length + 2), 0
        elif self.length == 1 and accepted == 0:
            self._backoff = min(MAX_BACKOFF, max(1, 2 * self._backoff))
            self._idle = self._backoff
        else:
            self.length = max(1, self.length - 1)

    def draft(self, req: EngineRequest, grammar: GrammarState | None, running: int) -> Draft | None:
        """Up to max_draft tokens to follow `req`'s tokens, or None: none found, or the running batch of
        `running` requests is past the policy's max_batch."""
        if running > self.policy.max_batch or not req.output_token_ids:
            return None
        self._catch_up(req)
        self._adapt(req)
        if self._idle:
            self._idle -= 1
            return None
        # Room: the draft plus the token after it stay within max_tokens and the context.
        k = min(self.length, req.sampling.max_tokens - len(req.output_token_ids) - 1,
                self.max_model_len - req.num_tokens - 1)
        if k <= 0:
            return None
        if grammar is None:
            tokens = self.index.propose(k)
            return Draft.of(tokens) if tokens else None
        return self._within_grammar(k, grammar)

    def _catch_up(self, req: EngineRequest) -> None:
        """Indexes the tokens `req` gained since the last draft (the prompt, the first time)."""
        seen, n_prompt = len(self.index.tokens), req.num_prompt_tokens
        if seen < n_prompt:
            self.index.extend(req.prompt_token_ids[seen:])
            seen = n_prompt
        self.index.extend(req.output_token_ids[seen - n_prompt:])

    def _within_grammar(self, k: int, grammar: GrammarState) -> Draft | None:
        trial = grammar.fork()
        tokens: list[int] = []
        forced: list[bool] = []
        proposal = self.index.propose(k)
        while proposal and len(tokens) < k:
            token = proposal.pop(0)
            if not trial.allows(token):
                break
            trial.accept(token)
            if trial.is_terminated():
                tokens.append(token)
                forced.append(False)
                break
            run = trial.forced_tokens() if self.fast_forward else []
            if len(tokens) + 1 + len(run) > k:
                break  # jump-forward would take the whole run after `token`: stop before it
            tokens += [token, *run]
            forced += [False] + [True] * len(run)
            if run:
                trial.accept_forced(run)
                if trial.is_terminated():
                    break
                proposal = self.index.propose(k - len(tokens), extra=tokens)
        return Draft.of(tokens, forced) if tokens else None
