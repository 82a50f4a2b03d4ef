"""The repetition guard: a tail that is one span repeated over and over is found, and the engine stops there."""
from __future__ import annotations

from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.repetition import REPETITION, repeated_tail, repeated_template
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


def cut(text: str) -> str | None:
    at = repeated_tail(text)
    return None if at is None else text[:at].rstrip()


def test_loops_are_found_and_cut_after_their_first_occurrence() -> None:
    assert cut("The minimum is " + "8% " * 14) == "The minimum is 8%"
    assert cut("It is 1" + "0" * 40) == "It is 10"
    assert cut("Answer: " + "the same sentence again. " * 3) == "Answer: the same sentence again."
    assert cut("x" + " the" * 12) == "x the"


def test_ordinary_text_is_left_alone() -> None:
    for text in ("The fine is 10,000,000 euro, or 10 per cent of turnover.",
                 "Banks must hold 4.5%, 6% and 8% of risk-weighted assets; the buffer is 2.5%.",
                 "1.1 This notice applies. 1.2 It applies again to branches. 1.3 It applies to agents.",
                 "Name" + " " * 60 + "Value", "ab" * 10):
        assert repeated_tail(text) is None, text


def test_lines_that_differ_only_in_their_figures_are_a_loop_cut_after_the_first() -> None:
    halving = "".join(f"The minimum short position in sovereign bonds is {n} billion / 2 = {n / 2:g} billion.\n"
                      for n in (520, 260, 130, 65, 32.5))
    text = "To determine the position, we divide.\n\n" + halving
    assert cut(text) == ("To determine the position, we divide.\n\n"
                         "The minimum short position in sovereign bonds is 520 billion / 2 = 260 billion.")
    assert repeated_template(text[:-1]) is None  # a line still being written is not judged
    three = "".join(halving.splitlines(keepends=True)[:3])
    for ordinary in (three,  # three such lines are an answer, not yet a loop
                     "Tier 1: 6%\nTier 2: 2%\nTier 3: 1%\nTier 4: 0%\n",  # short rows of a list
                     "Banks hold 4.5% of RWA.\nThe buffer adds 2.5% on top.\nLeverage must be 3% at least.\n"
                     "Reports are due within 30 days.\n"):
        assert repeated_tail(ordinary) is None, ordinary


def test_a_line_counting_on_in_its_figures_is_a_loop_even_when_short() -> None:
    """A figure's trailing full stop is the sentence's, not the figure's: "The fee is due in May 2031." read as
    "The fee is due in May #" fell under TEMPLATE_MIN and the count ran to max_tokens (a blind set's answer)."""
    counting = "".join(f"The fee is due in May {year}.\n\n" for year in range(2028, 2034))
    text = "The yearly fee is EUR 120.\n\n" + counting
    assert cut(text) == "The yearly fee is EUR 120.\n\nThe fee is due in May 2028."
    assert repeated_tail("Fees: 2.5%.\nFees: 3.5%.\nFees: 4.5%.\nFees: 5.5%.\n") is None  # short rows stay a list


# Two free answers of the seventh document set, as the model wrote them to the token limit (issue 49)
MARGIN = ("The confirmation margin applies to a 150-day USance LC issued by a CRG 4 bank. The confirmation margin is "
          "set by the USCCA, which is a USC-based regulatory body that sets the maximum allowable confirmation margin "
          "for USLLCs. The maximum allowable confirmation margin is 1.5% of the LC value, which is 0.20% of the LC "
          "amount.\n\nThe USCCA has set a maximum allowable confirmation margin of 1.5% for USLLCs, which is 1.5% of "
          "the LC value. This means that a 150-day USance LC issued by a CRG 4 bank may have a maximum confirmation "
          "margin of 1.5% of the LC value, which is 0.20% of the LC amount.\n\nThe USCCA also sets a maximum "
          "allowable confirmation margin of 1.5% for USLLCs, which is 1.5% of the LC value. The")
OUTFLOW = ("The hypothetical outflow is a hypothetical outflow of 25% of NAV over 5 days, carried forward for no more "
           "than 10 dealing days. This is a hypothetical outflow that is not a real outflow, but rather a hypothetical "
           "outflow that is carried forward for no more than 10 dealing days.\n\nThe hypothetical outflow is a "
           "hypothetical outflow that is carried forward for no more than 10 dealing days, which is a hypothetical "
           "outflow that is carried forward for no more than 10 days.\n\nThe hypothetical outflow is a hypothetical "
           "outflow that is carried forward for no more than 10 days, which is a hypothetical outflow that is carried "
           "forward for no more than 10 days.\n\nThe")


def test_sentences_restated_with_a_word_changed_are_a_loop_cut_before_the_first() -> None:
    assert cut(MARGIN) == MARGIN[:MARGIN.index(" This means")]
    assert cut(OUTFLOW) == OUTFLOW[:OUTFLOW.index("\n\nThe hypothetical outflow is a hypothetical outflow that")]
    assert repeated_tail(MARGIN[:MARGIN.index("The USCCA also")]) is None  # one restatement is not yet a loop
    for ordinary in ("Banks must hold common equity tier 1 capital of at least 4.5% of risk-weighted assets. The "
                     "capital conservation buffer is 2.5% of risk-weighted assets. The leverage ratio must be at "
                     "least 3% of the exposure measure. ",
                     "The limit is 10% of own funds for a single name. The limit is 25% of own funds for a group of "
                     "connected clients. The limit is 100% of own funds for all large exposures together. "):
        assert repeated_tail(ordinary) is None, ordinary


def _run(engine: LLMEngine, sampling: SamplingParams) -> tuple[str, EngineRequest]:
    req = EngineRequest("r", engine.tokenizer.encode("Say it"), sampling, "document_qa")
    engine.add_request(req)
    text = []
    while engine.has_unfinished():
        text.extend(o.new_text for o in engine.step())
    return "".join(text), req


def test_the_engine_stops_a_looping_request_when_asked(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                                    threads=1))
    loop = "(ab ){40}"  # a grammar that forces a loop, whatever the random model prefers
    text, req = _run(engine, SamplingParams(max_tokens=200, regex=loop, stop_repetition=True))
    assert text.strip() == "ab" and req.status.finish_reason == "stop" and req.stop_reason == REPETITION
    assert len(req.output_token_ids) < 100  # stopped early, not at the grammar's end
    text, req = _run(engine, SamplingParams(max_tokens=200, regex=loop))  # without the guard: the whole loop
    assert text == "ab " * 40 and req.stop_reason != REPETITION


def test_a_short_figure_loop_is_found_after_four_copies() -> None:
    """Issue 49: "2026.2026.2026..." ran a date answer to its token limit: one token per digit, the loop filled
    the budget before it covered the 32 characters the guard needed."""
    assert cut("By 2026.2026.2026.2026.") == "By 2026."
    assert cut("It is 8% 8% 8% 8%") == "It is 8%"
    for text in ("EUR 1,000,000,000,000", "paragraph 1.1.1 applies", "By 2026.2026.2026"):
        assert repeated_tail(text) is None, text  # one number; a reference; three copies are not yet a loop


def test_a_figure_loop_that_runs_into_max_tokens_is_cut(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                                    threads=1))
    # Jump-forward writes the forced loop to the budget in one step: the guard still cuts it.
    text, req = _run(engine, SamplingParams(max_tokens=30, regex=r"(2026\.){40}", stop_repetition=True))
    assert text == "2026." and req.status.finish_reason == "length"
