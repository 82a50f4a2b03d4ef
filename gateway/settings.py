"""Gateway settings: one pydantic-settings class, read once from `FINSERVE_*` environment variables.

Names line up with the variables other packages read directly (`FINSERVE_HOME`,
`FINSERVE_DATABASE_URL`, `FINSERVE_POLICY`), so one environment configures everything.
Derived values (resolved paths, the EngineConfig) are computed, never written back.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.config import EngineConfig
from policies import Policy

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"  # folder under $FINSERVE_HOME/models (see engine.model.prepare)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FINSERVE_", frozen=True, extra="ignore")

    home: Path = Path(".finserve")
    host: str = "127.0.0.1"  # loopback by default: exposing the gateway is a deliberate choice
    port: int = Field(8000, ge=1, le=65535)

    # --- engine ---
    model: Path | None = None  # HF-format folder; None: $FINSERVE_HOME/models/SmolLM2-135M-Instruct
    served_model_name: str | None = None  # the `model` id clients use; None: the folder name
    device: str = "cpu"
    dtype: str = "auto"
    kv_cache_memory_bytes: int = Field(1 << 30, gt=0)
    max_num_batched_tokens: int = Field(256, gt=0)
    max_num_seqs: int = Field(64, gt=0)
    max_model_len: int | None = Field(None, gt=0)
    scheduling: Literal["class", "fcfs"] = "class"
    threads: int | None = Field(None, gt=0)  # torch intra-op threads on CPU; None = all cores
    seed: int = 0

    # --- gateway ---
    database_url: str | None = None  # None: sqlite:///$FINSERVE_HOME/finserve.db
    policy: Path | None = None  # None: packaged policies/default.toml
    log_json: bool | None = None  # None: JSON unless stderr is a terminal
    log_level: str = "info"
    max_body_bytes: int = Field(8 << 20, gt=0)  # larger bodies get 413 before they are parsed
    rate_limit_burst_s: float = Field(2.0, gt=0)  # a key may burst this many seconds' worth of its rate
    auth_cache_ttl_s: float = Field(30.0, ge=0)  # verified keys are remembered this long (0 disables)
    risk_max_tokens: int = Field(64, gt=0)  # default answer length of /v1/risk/assess
    question_max_tokens: int = Field(256, gt=0)  # default answer length of document questions

    @property
    def model_path(self) -> Path:
        return self.model if self.model is not None else self.home / "models" / DEFAULT_MODEL_NAME

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path.name

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'finserve.db').resolve()}"

    def engine_config(self, policy: Policy) -> EngineConfig:
        return EngineConfig(
            model=str(self.model_path),
            policy=policy,
            device=self.device,
            dtype=self.dtype,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            scheduling=self.scheduling,
            num_threads=self.threads,
            seed=self.seed,
        )
