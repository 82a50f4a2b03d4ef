"""Drafts (engine/speculative/ngram.py, proposer.py): the latest earlier occurrence of the tail wins, the index
grows with the request instead of being rebuilt, the policy and the request's sampling decide whether it drafts
at all, and a grammar cuts the draft where it would refuse a token and marks the tokens it forces."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.request import EngineRequest, SamplingParams
from engine.speculative.ngram import NgramIndex
from engine.speculative.proposer import MAX_BACKOFF, Drafter, drafts_for
from engine.structured import compile_json_schema
from engine.tokenizer import Tokenizer
from policies.model import Speculation

ON = Speculation(enabled=True, max_draft=8, ngram_min=1, ngram_max=3, max_batch=4)


def test_the_longest_tail_that_occurred_and_its_latest_occurrence_win() -> None:
    index = NgramIndex(1, 3)
    index.extend([1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 2, 3])
    assert index.propose(3) == [4, 5, 7]  # the tail "7 2 3" never occurred before; "2 3" did, last before 4
    index.extend([8])
    assert index.propose(4) == []  # "3 8", "8": never seen before
    assert index.propose(2, extra=[1, 2]) == [3, 4]  # a draft's own tokens extend the tail
    index.extend([1])
    assert index.propose(2) == [2, 3]  # "8 1" unseen, "1" last followed by 2 3


def test_the_index_grows_with_the_request() -> None:
    drafter = Drafter(ON, max_model_len=4096, fast_forward=True)
    req = EngineRequest("r", [5, 6, 7, 8, 5, 6], SamplingParams(max_tokens=32), "document_qa")
    req.output_token_ids = [7]
    assert drafter.draft(req, None, running=1) is not None
    first = len(drafter.index.tokens)
    req.output_token_ids += [8, 5]
    draft = drafter.draft(req, None, running=1)
    assert len(drafter.index.tokens) == first + 2 and draft is not None and draft.token_ids[:2] == (6, 7)


def test_who_drafts_and_when() -> None:
    greedy, seeded = SamplingParams(), SamplingParams(temperature=0.7, seed=3)
    assert drafts_for(greedy, ON, "auto") and not drafts_for(SamplingParams(temperature=0.7), ON, "auto")
    assert drafts_for(SamplingParams(temperature=0.7), dataclasses.replace(ON, sampled=True), "auto")
    assert not drafts_for(seeded, ON, "auto")  # seeded sampling stays the same alone and batched
    assert not drafts_for(greedy, ON, "off") and not drafts_for(greedy, Speculation(), "auto")
    drafter = Drafter(ON, max_model_len=4096, fast_forward=True)
    req = EngineRequest("r", [5, 6, 7, 8, 5, 6], SamplingParams(max_tokens=3), "document_qa")
    req.output_token_ids = [7]
    assert drafter.draft(req, None, running=5) is None  # past max_batch
    draft = drafter.draft(req, None, running=4)
    assert draft is not None and draft.token_ids == (8,)  # max_tokens 3: one drafted, then the step's own token


def test_a_grammar_cuts_the_draft_and_marks_what_it_forces(default_model_dir: Path) -> None:
    tok = Tokenizer.from_folder(default_model_dir)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["name", "n"], "additionalProperties": False}
    grammar = compile_json_schema(tok, json.dumps(schema)).new_state()
    opening = grammar.forced_tokens()  # {"name
    grammar.accept_forced(opening)

    def draft_after(source: str, written: str) -> tuple[list[str], list[bool]]:
        state = grammar.fork()
        out = opening + tok.encode(written, add_special_tokens=False)
        for t in out[len(opening):]:
            state.accept(t)
        req = EngineRequest("r", tok.encode(source, add_special_tokens=False), SamplingParams(max_tokens=64),
                            "bulk_extraction")
        req.output_token_ids = out
        draft = Drafter(ON, max_model_len=4096, fast_forward=True).draft(req, state, running=1)
        assert draft is not None
        return [tok.decode([t]) for t in draft.token_ids], list(draft.forced)

    text, forced = draft_after('Acme Corp","n":12} and more', '":"Ac')
    assert "".join(text) == 'me Corp","n":12}'  # the draft ends with the document
    assert forced == [t == "n" for t in text]  # the key after '","' is forced, the rest is the model's to verify
    text, _ = draft_after('Acme Corp","n":twelve} and more', '":"Ac')
    assert "".join(text) == 'me Corp","n":'  # "tw" is no integer: the grammar cuts the draft before it


def test_refused_one_token_drafts_back_off_and_a_whole_accept_resumes() -> None:
    drafter = Drafter(ON, max_model_len=4096, fast_forward=True)
    prompt = list(range(100, 400))  # the output copies the prompt: a draft is always found
    req = EngineRequest("r", prompt, SamplingParams(max_tokens=4096), "document_qa")
    req.output_token_ids = [100]

    def step(accept: bool) -> int:
        """One engine step: the draft offered (its length, 0 for none), the model refusing or taking all of it."""
        draft = drafter.draft(req, None, running=1)
        n = 0 if draft is None else len(draft.token_ids)
        req.num_draft_tokens += n
        req.num_accepted_tokens += n if accept else 0
        req.output_token_ids.append(prompt[len(req.output_token_ids)])
        return n

    lengths = [step(False) for _ in range(8 + 1 + 2 + 4)]
    # 8, 7 .. 2 shrink by one; the refused one-token draft skips 1 step, the next 2, then 4
    assert lengths == [8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 0, 0, 1, 0, 0]
    assert [step(False) for _ in range(3)] == [0, 0, 1]
    skipped = [step(False) for _ in range(40)]
    assert max(len(run) for run in "".join("x" if n == 0 else " " for n in skipped).split()) == MAX_BACKOFF
    while step(True) == 0:  # the next draft offered is taken whole: drafts grow again, no skipped step
        pass
    assert [step(True) for _ in range(3)] == [3, 5, 7]
