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
from tests.engine.family_models import hf_generate
from tests.engine.gguf_families import CASES
from tests.engine.test_engine_parity import make_engine
from tests.engine.test_family_parity import req, run

N = 12
# llama.cpp's sdist is downloaded once (77 MB) and every family converted once: `make test` runs these, not test-fast
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def imported(gguf_family):
    return gguf_family


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


_SAMPLES = [
    "Hello world", "naïve café, Ünïcödé", "日本語のテキストと中文字符", "한국어 문장", "Ελληνικά και русский текст",
    "🦙🚀 😶\u200d🌫️ ✅", "1234567890", "3.14159 and 2.71828", "1,000,000.00 USD", "-42 + 17 = -25", "2024-01-31T12:00Z",
    "$1.5bn in Q3'24", "a  b   c    d", "   leading", "trailing   ", "\t\ttabs\tinside", "\n\nnewlines\n", " \n \n\n \t",
    "def f(x):\n    return x ** 2\n", "if (a && b) { c(); } else { d[i++] = 0; }", '{"key": [1, 2.5, null, "v"]}',
    "<html><body class=\"x\">text</body></html>", "I've been 'told he's there, 'RE you sure? 'M not sure I'll",
    "SELECT id, SUM(amount) FROM trades WHERE ccy = 'EUR' GROUP BY id;", "____----====****", "...!!!???",
    "ﬁ ligature, Å vs Å (NFC/NFD), \u00a0nbsp, zero\u200bwidth", "x" * 40, "3333333 33333333", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math",
]
STYLE_CASE = {"smollm": "granite", "llama3": "llama3", "qwen2": "qwen2", "spm-llama": "mistral", "spm-phi3": "phi3",
              "spm-gemma": "gemma2"}


def _texts() -> list[str]:
    """A few hundred strings: the samples, lines of the project's docs, and seeded mixes of both."""
    lines = [ln for p in sorted(Path(__file__).resolve().parents[2].glob("docs/*.md"))
             for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    rng = random.Random(3)
    mixes = ["".join(rng.choice([*_SAMPLES, *lines[:200], " ", "  ", "\n", "\t", "0", "42"]) for _ in range(4))
             for _ in range(150)]
    return [*_SAMPLES, *rng.sample(lines, 120), *mixes]


@pytest.mark.parametrize("style", STYLE_CASE)
def test_tokenizer_encodes_as_the_source_models(imported, style: str) -> None:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    source, folder = imported(STYLE_CASE[style])
    theirs = transformers.AutoTokenizer.from_pretrained(source)
    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = _texts()
    if style.startswith("spm-"):
        # SentencePiece itself is the reference: transformers' Metaspace adds no "▁" to a text that starts with a
        # space ("  id" -> ▁▁ id, where SentencePiece and llama.cpp give ▁▁ ▁id)
        import sentencepiece

        reference = sentencepiece.SentencePieceProcessor(model_file=str(source / "tokenizer.model")).encode
    else:
        specials = [t for t in theirs.all_special_tokens if ours.token_to_id(t) is not None]
        texts += [f"{s}user\nHi {t}{s} there" for s in specials for t in specials[:2]]

        def reference(text: str) -> list[int]:
            return list(theirs.encode(text, add_special_tokens=False))
    mismatched = [t for t in texts if ours.encode(t, add_special_tokens=False).ids != reference(t)]
    assert not mismatched, f"{len(mismatched)} of {len(texts)} differ, e.g. {mismatched[:3]!r}"
    for text in texts[:60]:
        assert ours.decode(ours.encode(text, add_special_tokens=False).ids, skip_special_tokens=False) == text
    config = json.loads((folder / "tokenizer_config.json").read_text())
    bos = ours.token_to_id(config["bos_token"]) if config.get("bos_token") else None
    first = ours.encode("Hello", add_special_tokens=True).ids[0]
    assert (first == bos) == config["add_bos_token"] == (style in ("llama3",) or style.startswith("spm-"))


@pytest.mark.parametrize("case", ["llama3", "phi3"])
def test_q8_0_gguf_imports_within_its_rounding_and_serves(imported, tmp_path: Path, case: str) -> None:
    """The converter's own Q8_0 (--outtype q8_0): each imported matrix is the source's to within half a block step
    (layout, un-permutation and block order end to end; llama3's q/k are permuted, phi3's qkv fused), vectors exact."""
    from engine.model.gguf_import import convert_gguf
    from tests.engine.gguf_families import gguf_of

    source, _ = imported(case)
    folder = tmp_path / "q8"
    convert_gguf(gguf_of(source, case, outtype="q8_0"), folder)
    src, out = load_file(source / "model.safetensors"), load_file(folder / "model.safetensors")
    assert src.keys() == out.keys()
    for name, weight in src.items():
        if weight.ndim == 1:
            np.testing.assert_array_equal(out[name], weight, err_msg=name)
            continue
        blocks = weight.reshape(weight.shape[0], -1, 32)
        step = np.abs(blocks).max(axis=-1, keepdims=True) / 127  # Q8_0: d = max |w| / 127 per 32 values
        # half a step, plus 127 q times d's own fp16 rounding (2^-11 relative)
        assert (np.abs(out[name].reshape(blocks.shape) - blocks) <= step * (0.5 + 127 * 2**-11)).all(), name
    engine = make_engine(folder, max_num_batched_tokens=16)
    got = run(engine, {0: [replace(req("a", list(range(10, 40))), sampling=replace(req("x", [1]).sampling,
                                                                                    max_tokens=4))]})
    assert len(got["a"][0]) == 4


def test_large_models_are_written_in_shards_the_engine_loads(imported, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards of at most SHARD_BYTES (a tensor larger than that alone) and their index: the same tensors as one file,
    and the engine's greedy tokens from them are the single file's."""
    import engine.model.gguf_import as gguf_import
    from tests.engine.gguf_families import gguf_of

    source, single = imported("qwen3")
    monkeypatch.setattr(gguf_import, "SHARD_BYTES", 1 << 20)  # the 49k x 64 embedding alone is 12 MB
    gguf_import.convert_gguf(gguf_of(source, "qwen3"), tmp_path / "sharded")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2 and not (tmp_path / "sharded" / "model.safetensors").exists()
    merged = {k: v for f in shards for k, v in load_file(tmp_path / "sharded" / f).items()}
    whole = load_file(single / "model.safetensors")
    assert merged.keys() == whole.keys() == index["weight_map"].keys()
    assert all(np.array_equal(merged[k], whole[k]) for k in whole)
    prompt = list(range(100, 130))
    outputs = []
    for folder in (single, tmp_path / "sharded"):
        r = replace(req("a", prompt), sampling=replace(req("x", [1]).sampling, max_tokens=6))
        outputs.append(run(make_engine(folder), {0: [r]})["a"][0])
    assert outputs[0] == outputs[1]
