"""The one Settings object: every engine knob reachable from FINSERVE_* variables, nothing silently dropped."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.settings import Settings
from engine.config import EngineConfig
from engine.grammar_limits import GrammarLimits
from engine.grammar_pool import GrammarPoolConfig
from policies import load_policy

# A value for each EngineConfig field that differs from its default, set through Settings.
CHANGED = {
    "model": ("model", "/models/x", "/models/x"),
    "device": ("device", "cuda", "cuda"),
    "dtype": ("dtype", "bfloat16", "bfloat16"),
    "kv_cache_dtype": ("kv_cache_dtype", "bfloat16", "bfloat16"),
    "weights": ("weights", "int8", "int8"),
    "native_kernels": ("native_kernels", False, False),
    "kernel_isa": ("kernel_isa", "avx2", "avx2"),
    "batch_invariant": ("batch_invariant", True, True),
    "cuda_graphs": ("cuda_graphs", False, False),
    "prefill_weights": ("prefill_weights", "dequantize", "dequantize"),
    "block_size": ("block_size", 32, 32),
    "kv_cache_memory_bytes": ("kv_cache_memory_bytes", 123 << 20, 123 << 20),
    "num_blocks_override": ("kv_cache_num_blocks", 77, 77),
    "max_num_batched_tokens": ("max_num_batched_tokens", 512, 512),
    "max_num_seqs": ("max_num_seqs", 8, 8),
    "max_model_len": ("max_model_len", 1024, 1024),
    "enable_prefix_caching": ("enable_prefix_caching", False, False),
    "scheduling": ("scheduling", "fcfs", "fcfs"),
    "num_threads": ("threads", 3, 3),
    "starvation_steps": ("starvation_steps", 9, 9),
    "fast_forward": ("fast_forward", False, False),
    "seed": ("seed", 5, 5),
    "grammar_limits": ("grammar_max_ref_chain", 10, GrammarLimits(max_ref_chain=10)),
    "grammar_pool": ("grammar_workers", 3, GrammarPoolConfig(workers=3)),
}


def test_every_grammar_limit_has_its_setting() -> None:
    limits = Settings(**{f"grammar_{f.name}": 7 for f in dataclasses.fields(GrammarLimits)}).grammar_limits
    assert limits == GrammarLimits(**{f.name: 7 for f in dataclasses.fields(GrammarLimits)})
    assert Settings().grammar_limits == GrammarLimits() and Settings().grammar_pool == GrammarPoolConfig()


def test_every_engine_config_field_is_reachable_from_settings() -> None:
    fields = {f.name for f in dataclasses.fields(EngineConfig)} - {"policy"}
    assert fields <= set(CHANGED), f"EngineConfig fields with no setting: {sorted(fields - set(CHANGED))}"
    settings = Settings(**{setting: value for setting, value, _ in CHANGED.values()})
    config = settings.engine_config(load_policy())
    for field, (_, _, expected) in CHANGED.items():
        if field in fields:
            assert getattr(config, field) == expected, field


def test_settings_come_from_the_environment_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path))
    monkeypatch.setenv("FINSERVE_BLOCK_SIZE", "32")
    monkeypatch.setenv("FINSERVE_JOBS_LEASE_S", "60")
    monkeypatch.setenv("FINSERVE_JOBS_REQUEST_TIMEOUT_S", "30")
    s = Settings()
    assert (s.home, s.block_size, s.jobs_lease_s) == (tmp_path, 32, 60.0)
    assert s.resolved_database_url == f"sqlite:///{(tmp_path / 'finserve.db').resolve()}"
    assert s.engine_config(load_policy()).block_size == 32


def test_a_request_timeout_longer_than_the_lease_is_refused() -> None:
    with pytest.raises(ValueError, match="LEASE"):
        Settings(jobs_lease_s=10, jobs_request_timeout_s=20)


def test_auto_weights_keep_a_dense_checkpoint_and_say_why() -> None:
    """`auto` never changes a model's answers: q4 only for weights that are already 4-bit, else dense."""
    import torch

    from engine.model import cpu_kernels
    from engine.model.linear import resolve_weight_format
    from engine.model.quant import dequantize, quantize

    cpu, fp32 = torch.device("cpu"), torch.float32
    dense = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    fmt, reason = resolve_weight_format("auto", cpu, fp32, probe=dense)
    assert fmt == "fp32" and ("keeps its precision" in reason or "kernels not built" in reason)
    four_bit = dequantize(quantize(dense, "q4"))
    assert resolve_weight_format("auto", cpu, fp32, probe=four_bit)[0] == \
        ("q4" if cpu_kernels.kernel_isa() is not None else "fp32")
    assert resolve_weight_format("int8", cpu, fp32, probe=dense) == ("int8", "asked for (FINSERVE_WEIGHTS or --weights)")
    assert resolve_weight_format("auto", cpu, torch.bfloat16, dtype_explicit=True, probe=dense)[0] == "bf16"


def test_threads_resolve_in_the_settings_so_every_command_runs_the_same_count() -> None:
    from engine.factory import default_threads

    assert Settings(_env_file=None).engine_config(load_policy()).num_threads == default_threads()
    assert Settings(_env_file=None, threads=1).engine_config(load_policy()).num_threads == 1


def test_the_served_model_name_is_the_setting_else_the_folder_name(tmp_path: Path) -> None:
    plain = Settings(_env_file=None, home=tmp_path, model=tmp_path / "models" / "acme-7b", served_model_name=None)
    assert plain.model_id() == "acme-7b"
    assert plain.model_id("/elsewhere/other-1b") == plain.model_id(Path("/elsewhere/other-1b")) == "other-1b"
    assert Settings(_env_file=None, home=tmp_path, served_model_name=None).model_id() == "SmolLM2-135M-Instruct"
    named = Settings(_env_file=None, home=tmp_path, model=tmp_path / "acme-7b", served_model_name="risk-model")
    assert named.model_id() == named.model_id("/elsewhere/other-1b") == "risk-model"


def test_the_served_model_name_is_derived_in_one_place() -> None:
    """Only core/settings.py reads the `served_model_name` setting: the gateway's `model` id and metrics label,
    the engine server's, the ledger rows' model_id and `finserve ledger replay`'s all come from Settings.model_id
    (tests/gateway/test_model_name.py checks that the running ones agree)."""
    import ast

    from tests.test_size import ROOT, python_files

    readers = []
    for path in python_files(ROOT):
        rel = path.relative_to(ROOT)
        text = path.read_text()
        if rel.parts[0] == "tests" or str(rel) == "core/settings.py" or "served_model_name" not in text:
            continue
        readers += [f"{rel}:{node.lineno}" for node in ast.walk(ast.parse(text, str(path)))
                    if isinstance(node, ast.Attribute) and node.attr == "served_model_name"]
    assert not readers, readers
