"""GGUF files of every family, written by llama.cpp's own converter, import into folders that run as the source
HF model does: the same config (as each family reads it), the same weights, a tokenizer that encodes as the
source's, and the engine's greedy tokens and logprobs equal to transformers' generate on the source (fp32), with
prompts longer than every sliding window.
"""
from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from engine.model.families import read_config
from engine.model.gguf_import import convert_gguf
from tests.engine.family_models import hf_generate
from tests.engine.gguf_families import CASES, gguf_of, make_source
from tests.engine.test_engine_parity import make_engine
from tests.engine.test_family_parity import req, run

N = 12


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path):
    """case -> (source HF folder, folder imported from its GGUF), built once per module."""
    root = tmp_path_factory.mktemp("gguf_families")
    made: dict[str, tuple[Path, Path]] = {}

    def make(case: str) -> tuple[Path, Path]:
        if case not in made:
            source = make_source(root / "src", case, root / "tokenizers", default_model_dir)
            convert_gguf(gguf_of(source, case), root / "imported" / case)
            made[case] = source, root / "imported" / case
        return made[case]

    return make


@pytest.mark.parametrize("case", CASES)
def test_config_and_weights_are_the_source_models(imported, case: str) -> None:
    source, folder = imported(case)
    want, got = read_config(source), read_config(folder)
    if case == "mistral":  # llama.cpp writes Mistral as `llama` (no window here: its GGUF cannot carry one)
        want = replace(want, model_type="llama")
    assert got == want
    src, out = load_file(source / "model.safetensors"), load_file(folder / "model.safetensors")
    assert src.keys() == out.keys()
    for name, weight in src.items():
        if want.norm_offset and name.endswith("norm.weight"):  # Gemma's GGUF holds 1 + w: equal where it is used
            np.testing.assert_array_equal(np.float32(1) + out[name], np.float32(1) + weight, err_msg=name)
        else:
            np.testing.assert_array_equal(out[name], weight, err_msg=name)


@pytest.mark.parametrize("case", CASES)
def test_engine_on_the_gguf_matches_transformers_on_the_source(imported, case: str) -> None:
    source, folder = imported(case)
    vocab = json.loads((source / "config.json").read_text())["vocab_size"]
    rng = random.Random(7)
    prompts = [[rng.randrange(5, vocab) for _ in range(n)] for n in (5, 41, 70, 23)]
    want_tokens, want_logprobs = hf_generate(source, prompts, N)
    engine = make_engine(folder, max_num_batched_tokens=16)
    reqs = [replace(req(f"r{i}", p), sampling=replace(req("x", p).sampling, max_tokens=N))
            for i, p in enumerate(prompts)]
    got = run(engine, {0: reqs[:2], 2: reqs[2:]})
    assert [got[f"r{i}"][0] for i in range(len(prompts))] == want_tokens
    for i, want in enumerate(want_logprobs):
        assert got[f"r{i}"][1] == pytest.approx(want, abs=2e-4), f"r{i}"
