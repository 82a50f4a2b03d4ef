"""The GGUF -> HF folder conversion: tensor layout, config, atomic prepare, and parity with transformers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from engine.model.gguf_arch import ARCHES, GgufArch, UnsupportedGguf
from engine.model.gguf_import import SUPPORTED_TYPES, GgufFile, convert_gguf, unpermute_rope_rows
from engine.model.gguf_rope import _llama3_table, llama3_from_rope_freqs
from engine.model.prepare import (
    DEFAULT_GGUF_FILE,
    default_gguf_path,
    default_model_dir,
    ensure_default_model,
    is_prepared,
)
from engine.tokenizer import Tokenizer

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    # convert_hf_to_gguf.py LlamaModel.permute, which wrote the GGUF.
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(
        weights.shape
    )


@pytest.mark.parametrize("heads, head_dim", [(9, 64), (3, 64), (1, 8), (4, 4)])
def test_unpermute_inverts_llama_cpp_permutation(heads: int, head_dim: int) -> None:
    hf = np.random.default_rng(0).standard_normal((heads * head_dim, 12)).astype(np.float32)
    permuted = _llama_cpp_permute(hf, heads)
    assert not np.array_equal(permuted, hf)
    np.testing.assert_array_equal(unpermute_rope_rows(permuted, heads), hf)


def test_tensor_names() -> None:
    llama = GgufArch({}, {}, vocab_size=8)
    assert llama.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert llama.hf_name("output.weight") == "lm_head.weight"
    assert llama.hf_name("blk.12.attn_output.weight") == "model.layers.12.self_attn.o_proj.weight"
    assert llama.hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    with pytest.raises(UnsupportedGguf, match="'blk.0.attn_q.bias' is not supported for architecture 'llama'"):
        llama.hf_name("blk.0.attn_q.bias")
    assert ARCHES["qwen2"]({}, {}, 8).hf_name("blk.3.attn_q.bias") == "model.layers.3.self_attn.q_proj.bias"
    gemma = ARCHES["gemma2"]({}, {}, 8)  # Gemma's ffn_norm is the pre-FFN norm; post_attention_norm the sandwich one
    assert gemma.hf_name("blk.1.ffn_norm.weight") == "model.layers.1.pre_feedforward_layernorm.weight"
    assert gemma.hf_name("blk.1.post_attention_norm.weight") == "model.layers.1.post_attention_layernorm.weight"
    assert ARCHES["phi3"]({}, {}, 8).hf_name("blk.0.ffn_up.weight") == "model.layers.0.mlp.gate_up_proj.weight"


@pytest.mark.parametrize("dim, base, factor, original", [(128, 500000.0, 8.0, 8192), (64, 500000.0, 32.0, 8192),
                                                          (128, 500000.0, 32.0, 8192)])
def test_llama3_scaling_recovered_from_rope_freqs(dim: int, base: float, factor: float, original: int) -> None:
    """Llama 3.1 (head 128, factor 8) and 3.2 1B/3B (factor 32): the converter's table gives back their config."""
    table = _llama3_table(dim, base, factor, 1.0, 4.0, original)
    assert llama3_from_rope_freqs(table, dim, base) == {
        "rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": original}
    assert llama3_from_rope_freqs(np.ones(dim // 2, np.float32), dim, base) is None
    with pytest.raises(ValueError, match="not a llama3 RoPE scaling table"):
        llama3_from_rope_freqs(table[::-1].copy(), dim, base)


def _tiny_gguf(path: Path, arch: str, tensor_type: str = "F32", **extra: int) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in extra.items():
        writer.add_uint32(f"{arch}.{key.replace('__', '.')}", value)
    for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 32),
                       ("feed_forward_length", 64), ("attention.head_count", 2)):
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b"])
    writer.add_token_merges(["a b"])
    weight = np.zeros((2, 32), np.float32)
    if tensor_type == "F32":
        writer.add_tensor("token_embd.weight", weight)
    else:  # the raw bytes of one block per row; only the type matters here
        kind = gguf.GGMLQuantizationType[tensor_type]
        block, size = gguf.GGML_QUANT_SIZES[kind]
        writer.add_tensor("token_embd.weight", np.zeros((2, 32 // block * size), np.uint8), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_unsupported_architecture_and_tensor_type_are_one_line_refusals(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedGguf, match=r"^GGUF architecture 'mamba' is not supported; finserve imports gemma2"):
        convert_gguf(_tiny_gguf(tmp_path / "m.gguf", "mamba"), tmp_path / "out")
    assert "IQ4_NL" not in {t.name for t in SUPPORTED_TYPES}
    with pytest.raises(UnsupportedGguf, match=r"^GGUF tensor 'token_embd.weight' has type IQ4_NL, which finserve"):
        convert_gguf(_tiny_gguf(tmp_path / "q.gguf", "llama", "IQ4_NL"), tmp_path / "out2")
    assert not (tmp_path / "out2" / "model.safetensors").exists()
    # a key the architecture does not read (a window on `llama`: llama.cpp would ignore it too) is refused
    with pytest.raises(UnsupportedGguf, match=r"^GGUF key 'llama.attention.sliding_window' is not implemented"):
        convert_gguf(_tiny_gguf(tmp_path / "w.gguf", "llama", attention__sliding_window=4096), tmp_path / "out3")


def test_prepared_folder_matches_smollm2_135m(default_model_dir: Path) -> None:
    config = json.loads((default_model_dir / "config.json").read_text())
    expected = {
        "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0, "vocab_size": 49152, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    assert {key: config[key] for key in expected} == expected
    with safe_open(default_model_dir / "model.safetensors", framework="pt") as weights:
        names = set(weights.keys())
        assert weights.get_slice("model.embed_tokens.weight").get_shape() == [49152, 576]
        assert weights.get_slice("model.layers.0.self_attn.k_proj.weight").get_shape() == [192, 576]
        assert weights.get_slice("model.layers.29.mlp.down_proj.weight").get_shape() == [576, 1536]
        assert weights.get_tensor("model.norm.weight").dtype == torch.float32
    assert len(names) == 2 + 30 * 9 and "lm_head.weight" not in names
    tok_config = json.loads((default_model_dir / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == "<|im_end|>" and "<|im_start|>assistant" in tok_config["chat_template"]


def test_prepare_reuses_a_prepared_folder(default_model_dir: Path) -> None:
    def fail(*_args) -> None:
        raise AssertionError("a prepared folder must not be converted again")

    assert ensure_default_model(fail, home=default_model_dir.parent.parent) == default_model_dir


@pytest.mark.slow
def test_interrupted_prepare_leaves_nothing_behind(tmp_path: Path) -> None:
    def interrupt(description: str, done: int, total: int) -> None:
        if description == "dequantizing tensors" and done == 10:
            raise KeyboardInterrupt

    target = default_model_dir(tmp_path)
    killed = target.parent / f".{target.name}.killed.tmp"  # what a SIGKILLed prepare leaves behind
    (killed / "partial").mkdir(parents=True)
    with pytest.raises(KeyboardInterrupt):
        ensure_default_model(interrupt, home=tmp_path)
    assert not target.exists() and not is_prepared(target)
    # Only the lock file may remain next to where the folder would be.
    assert [p.name for p in target.parent.iterdir()] == [f".{target.name}.lock"]


def test_transformers_answers_paris_from_the_folder(default_model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    model = transformers.LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    tokenizer = Tokenizer.from_folder(default_model_dir)
    prompt = torch.tensor([tokenizer.encode_chat(QUESTION)])
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    answer = tokenizer.decode(out[0, prompt.shape[1] :].tolist())
    assert "Paris" in answer


@pytest.mark.slow
def test_logits_match_transformers_gguf_loader(default_model_dir: Path) -> None:
    """Our dequantization, tensor naming and q/k un-permutation against transformers' own GGUF path (~15 s)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.set_num_threads(1)
    gguf = default_gguf_path()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=DEFAULT_GGUF_FILE, dtype=torch.float32
    ).eval()
    ours = transformers.LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    # Same dequantized values, same names, same q/k row order: the weights are bit-identical.
    expected_weights, actual_weights = reference.state_dict(), ours.state_dict()
    assert expected_weights.keys() == actual_weights.keys()
    for name, tensor in actual_weights.items():
        assert torch.equal(tensor, expected_weights[name]), name
    tokenizer = Tokenizer.from_folder(default_model_dir)
    ids = torch.tensor([tokenizer.encode_chat(QUESTION) + tokenizer.encode(" The answer is 42, in 2024.")])
    with torch.no_grad():
        expected = reference(ids).logits
        actual = ours(ids).logits
    assert expected.shape == actual.shape == (1, ids.shape[1], 49152)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_gguf_file_reads_what_the_gguf_package_reads() -> None:
    """engine/model/gguf_file.py against gguf's GGUFReader on the shipped Q4_1 file: every key and value, every
    tensor's name, shape, type and bytes."""
    import gguf

    path = default_gguf_path()
    ours, theirs = GgufFile(path), gguf.GGUFReader(str(path))
    assert ours.metadata == {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert len(ours.tensors) == len(theirs.tensors)
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert (a.name, a.shape, a.tensor_type) == (b.name, tuple(int(n) for n in b.shape), b.tensor_type)
        assert np.array_equal(a.data.reshape(-1).view(np.uint8), np.asarray(b.data).reshape(-1).view(np.uint8))


def test_sentencepiece_vocabulary_without_special_ids_gets_llama_cpp_defaults() -> None:
    """A "llama" vocabulary: "▁" prefix and spaces, merges by piece score, byte fallback, BOS added by default,
    and <unk> <s> </s> at 0 1 2 when the GGUF names no special ids (as llama.cpp assumes)."""
    from engine.model.gguf_tokenizer import build_tokenizer, tokenizer_config, with_token_defaults

    pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "\u2581", "a", "b", "\u2581a", "ab",
              "\u2581ab"]
    types = [2, 3, 3, *[6] * 256, 1, 1, 1, 1, 1, 1]
    scores = [0.0, 0.0, 0.0, *[0.0] * 256, -5.0, -1.0, -2.0, -3.0, -4.0, -0.5]
    meta = with_token_defaults({"general.architecture": "llama", "tokenizer.ggml.model": "llama",
                                "tokenizer.ggml.tokens": pieces, "tokenizer.ggml.scores": scores,
                                "tokenizer.ggml.token_type": types})
    tok = build_tokenizer(meta)
    ids = tok.encode("ab ab é", add_special_tokens=True).ids
    assert [tok.id_to_token(i) for i in ids] == ["<s>", "\u2581ab", "\u2581ab", "\u2581", "<0xC3>", "<0xA9>"]
    assert tok.decode(ids) == "ab ab é"
    config = tokenizer_config(meta)
    assert (config["bos_token"], config["eos_token"], config["unk_token"], config["add_bos_token"]) == \
        ("<s>", "</s>", "<unk>", True)
