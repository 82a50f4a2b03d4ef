"""Frozen dataclasses that a validated policy file becomes, and the schema of that file.

Each field carries its knob(...) metadata (policies/schema.py): the loader derives the
accepted keys, types and bounds from these declarations alone, so a new policy setting is
one field here plus its line in default.toml (docs/POLICY.md). All objects are built with
named fields only (kw_only). The engine and gateway only ever ask these objects; no code
tests a class name to decide behaviour.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.risk_model import RiskRules
from policies.schema import knob

CLASS_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"  # names travel in an HTTP header and in metric labels


@dataclass(frozen=True, kw_only=True)
class SLOTargets:
    """Latency targets of a class; None ("none" in the file) means 'no target for this metric'."""

    ttft_ms: float | None = field(metadata=knob("time to first token target", gt=0, unit="milliseconds"))
    tpot_ms: float | None = field(metadata=knob("time per output token target", gt=0, unit="milliseconds"))
    e2e_ms: float | None = field(metadata=knob("whole-request latency target", gt=0, unit="milliseconds"))
    percentile: float = field(metadata=knob("the percentile the targets apply to, e.g. 99.0", gt=0, le=100))
    attainment_goal: float = field(
        metadata=knob("fraction of requests that must meet every target, e.g. 0.99", gt=0, le=1))


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """Prompt-lookup speculative decoding for a class (engine/speculative/): each decode step drafts up to
    `max_draft` tokens by finding the request's last n tokens (n from ngram_max down to ngram_min) earlier in its
    prompt or output and copying what followed, and verifies them in the same step. Greedy output is unchanged
    token for token, random sampling keeps its distribution; it pays where outputs copy their input (quotes,
    extracted values) and costs a verification chunk per step where they do not."""

    enabled: bool = field(default=False, metadata=knob("draft and verify the class's decodes"))
    max_draft: int = field(default=8, metadata=knob(
        "most tokens drafted per request and step (each request's length adapts below it)", ge=1, le=64))
    ngram_min: int = field(default=1, metadata=knob("shortest tail matched against the prompt and output", ge=1,
                                                    le=16, at_most="ngram_max"))
    ngram_max: int = field(default=3, metadata=knob("longest tail matched (tried first)", ge=1, le=16))
    max_batch: int = field(default=4, metadata=knob(
        "no drafts in a step whose running batch is larger: verifying costs more than it saves there", ge=1))
    sampled: bool = field(default=False, metadata=knob(
        "also draft for randomly sampled (temperature > 0, unseeded) requests; their drafts are verified one "
        "position at a time, which can cost more than the accepted tokens save"))


class RoutingStrategy(str, enum.Enum):
    """How a gateway picks an engine replica for a request of a class (gateway/replicas/router.py)."""

    AFFINITY = "affinity"  # the replica that holds the prompt's leading blocks (documents), load-bounded
    LEAST_WAITING = "least_waiting"  # power of two choices on the class's waiting requests
    LEAST_KV = "least_kv"  # the lowest KV use; shed (429) when every replica is saturated


@dataclass(frozen=True, kw_only=True)
class ClassPolicy:
    name: str = field(metadata=knob("the class's name: the key of its [classes.<name>] table", from_key=True))
    description: str = field(default="", metadata=knob("what the class is for", optional=True))
    priority: int = field(metadata=knob("larger = served first", unique=True))
    slo: SLOTargets = field(metadata=knob("latency targets"))
    max_input_tokens: int = field(metadata=knob("longest prompt admitted", gt=0))
    max_output_tokens: int = field(metadata=knob("largest max_tokens admitted", gt=0))
    max_running: int = field(metadata=knob("batch slots the class may hold at once", gt=0))
    queue_limit: int = field(metadata=knob("waiting requests before admission answers 429", gt=0))
    kv_min_share: float = field(metadata=knob(
        "guaranteed fraction of the KV block pool", ge=0, le=1, at_most="kv_max_share", pool_share=True))
    kv_max_share: float = field(metadata=knob(
        "the class never holds more than this fraction of the KV block pool", gt=0, le=1))
    step_token_share: float = field(metadata=knob(
        "fraction of every step's token budget reserved while the class has work", ge=0, le=1, pool_share=True))
    preemptible: bool = field(metadata=knob("whether other classes may preempt its requests"))
    prefix_caching: bool = field(metadata=knob("whether its prompts reuse and feed the prefix cache"))
    # Admission on second use: a computed prompt block enters the prefix cache only once a second prompt has
    # computed the same block (the same tokens after the same prefix), so the instructions a job's items share
    # are cached and each item's own text, never asked for again, is not.
    prefix_cache_reused_only: bool = field(default=False, metadata=knob(
        "with prefix_caching, cache only blocks a second prompt also computed (shared instructions, not each "
        "prompt's own text)"))
    # Prefill shield, phase "prefilling": in a step where a request of this class prefills,
    # lower-priority classes get no prefill tokens (their decodes still run), so the step, and the
    # class's TTFT, stay short. (Equivalent to a cap of 0 for that phase; see docs/POLICY.md.)
    prefill_isolation: bool = field(default=False, metadata=knob(
        "while the class prefills, lower-priority classes get no prefill tokens in that step"))
    # Prefill shield, phase "running": while the class has running requests, lower-priority
    # classes share at most this many prefill tokens per step (-1: no cap), so its decode steps,
    # and so its TPOT, stay short.
    shield_prefill_tokens: int = field(default=-1, metadata=knob(
        "while the class has running requests, lower-priority classes' prefill tokens per step (-1: no cap)",
        ge=-1))
    # Prefill shield, phase "always": in every step, lower-priority classes share at most this much
    # prefill, counted in token-equivalents at zero context (engine/sched/prefill_cost.py: a token deep in a
    # long document costs more), so a request of this class arriving at any moment waits behind one
    # short step, not a long document's full chunk. -1: no cap.
    shield_chunk_tokens: int = field(default=-1, metadata=knob(
        "in every step, lower-priority classes' prefill, in token-equivalents at zero context (-1: no cap)",
        ge=-1))
    # ... but only while the class is active: a request of it arrived in the last N seconds (-1: always). With no
    # traffic of the class, documents and bulk prefill in full chunks; the first request after a quiet spell
    # waits behind at most one full chunk.
    shield_active_s: float = field(default=-1.0, metadata=knob(
        "shield_chunk_tokens holds only within this many seconds of the class's last arrival (-1: always)", ge=-1))
    # The default shape of the class's domain answers (e.g. a risk verdict): a request that does
    # not ask for free text or pass its own schema decodes under this one. Empty: free text.
    response_schema: str = field(default="", metadata=knob(
        "JSON Schema the class's domain answers are constrained to by default (empty: free text)",
        optional=True, json_object=True))
    # Sampling default for requests that leave `temperature` unset on the OpenAI routes (whose own
    # default is OpenAI's 1.0); None keeps the route's default. Domain routes are greedy regardless.
    default_temperature: float | None = field(default=None, metadata=knob(
        "temperature when an OpenAI-route request leaves it unset (none: the route's default, 1.0)", ge=0, le=2))
    # Scaling out (docs/DEPLOY.md): which replica a gateway sends the class's requests to.
    routing: RoutingStrategy = field(default=RoutingStrategy.LEAST_WAITING, metadata=knob(
        "how a gateway picks an engine replica: affinity, least_waiting or least_kv"))
    # A request of the class keeps its prompt's cached KV blocks leased this long after it finishes:
    # other classes cannot evict them, they count against this class's KV share, and the class's own
    # newer work may take them back, oldest lease first. 0: no lease (ordinary LRU caching).
    kv_lease_s: float = field(default=0.0, metadata=knob(
        "seconds a finished request's cached prompt blocks stay leased to the class (0: none)", ge=0,
        unit="seconds"))
    # Fair share among tenants inside the class (docs/POLICY.md): one tenant never holds more than this
    # fraction of queue_limit waiting (its burst is refused, 429, to it alone), and waiting requests of
    # one priority are served by weighted fair queueing over tenants, not by arrival alone.
    tenant_queue_share: float = field(default=1.0, metadata=knob(
        "fraction of queue_limit one tenant may hold waiting (1: no per-tenant cap)", gt=0, le=1))
    # Weights of that fair queueing: a tenant of weight 2 gets two queue turns for one of a weight-1
    # tenant while both wait. A tenant not listed weighs 1.
    tenant_weights: Mapping[str, float] = field(default_factory=dict, metadata=knob(
        "tenant name -> its weight in the class's fair queueing (unlisted tenants: 1)", optional=True, gt=0))
    # Batch slots kept for a tenant with none running: a tenant already running a request of the class does not
    # take the class's last `tenant_reserved_slots` free slots, so another tenant's request arriving while one
    # tenant's burst holds the rest starts at once instead of waiting for the burst's first finish.
    tenant_reserved_slots: int = field(default=0, metadata=knob(
        "of max_running, the last free slots only a tenant with no running request of the class may take",
        optional=True, ge=0, at_most="max_running"))

    # Evidence (ledger/evidence.py, docs/OBSERVABILITY.md): the class's requests' input and output kept
    # encrypted, hashed into the ledger chain, for this many days (then deleted behind a chained tombstone).
    evidence: bool = field(default=False, metadata=knob(
        "keep each request's input and output as evidence (encrypted, chained with its ledger row)", optional=True))
    evidence_retention_days: float = field(default=183.0, metadata=knob(
        "days the class's evidence is kept before `finserve ledger prune` deletes it", gt=0, unit="days",
        optional=True))

    # Prompt-lookup speculative decoding (engine/speculative/; FINSERVE_SPECULATIVE=off turns it off everywhere).
    speculative: Speculation = field(default_factory=Speculation, metadata=knob(
        "prompt-lookup speculative decoding of the class's decodes (absent: off)", optional=True))

    # Risk rules as data (policies/risk.py): the verdict's score combines them with the model's judgement.
    risk_rules: RiskRules = field(default_factory=RiskRules, metadata=knob(
        "risk rules the class's verdicts are scored with (absent: the model alone)", optional=True))

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant_weights", MappingProxyType(dict(self.tenant_weights)))

    def tenant_queue_cap(self) -> int:
        """Waiting requests one tenant may hold in the class: its share of queue_limit, at least one."""
        return max(1, int(self.tenant_queue_share * self.queue_limit))

    def tenant_weight(self, tenant: str) -> float:
        return self.tenant_weights.get(tenant, 1.0)


@dataclass(frozen=True, kw_only=True)
class ClassificationRules:
    """Inputs of the ordered classification rules (explicit > route > tenant > heuristic)."""

    routes: Mapping[str, str] = field(metadata=knob("route name -> class name", class_ref=True))
    long_input_tokens: int = field(metadata=knob("heuristic: inputs at least this long ...", gt=0))
    long_input_class: str = field(metadata=knob("... go to this class", class_ref=True))
    default_class: str = field(metadata=knob("the class used when no rule decides", class_ref=True))

    def __post_init__(self) -> None:
        object.__setattr__(self, "routes", MappingProxyType(dict(self.routes)))


@dataclass(frozen=True, kw_only=True)
class RoutingPolicy:
    """What a gateway in front of engine replicas needs beyond each class's strategy (docs/DEPLOY.md)."""

    affinity_tokens: int = field(default=512, metadata=knob(
        "affinity: leading prompt tokens hashed into the document key (at most half the prompt)", gt=0))
    load_factor: float = field(default=1.5, metadata=knob(
        "affinity: a replica above this x the mean in-flight load may be skipped (1 = no affinity)", ge=1))
    spill_min_excess: int = field(default=8, metadata=knob(
        "affinity: ... and only when it holds this many more in flight than the least loaded", ge=0))
    saturated_kv_usage: float = field(default=0.9, metadata=knob(
        "least_kv: a replica at or above this KV use (0-1) is saturated", gt=0, le=1))
    saturated_waiting: int = field(default=8, metadata=knob(
        "least_kv: ... or with this many requests waiting; every replica saturated -> 429", gt=0))
    shed_retry_after_s: float = field(default=2.0, metadata=knob(
        "Retry-After of a request shed because every replica is saturated", gt=0, unit="seconds"))
    probe_interval_s: float = field(default=1.0, metadata=knob(
        "how often the gateway reads each replica's load and readiness", gt=0, unit="seconds"))


@dataclass(frozen=True, kw_only=True)
class Policy:
    classes: Mapping[str, ClassPolicy] = field(metadata=knob(
        "the workload classes by name", key_pattern=CLASS_NAME_PATTERN, nonempty=True,
        key_rule="class names must be lowercase letters, digits and '_', starting with a letter, at most 64 long"))
    classification: ClassificationRules = field(metadata=knob("how a request gets its class"))
    routing: RoutingPolicy = field(default_factory=RoutingPolicy, metadata=knob(
        "how a gateway spreads requests over engine replicas"))
    source: str = field(default="<memory>", metadata=knob("file the policy was loaded from", in_file=False))

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))

    def get(self, name: str) -> ClassPolicy:
        return self.classes[name]

    @property
    def by_priority(self) -> tuple[ClassPolicy, ...]:
        """Classes from highest to lowest priority."""
        return tuple(sorted(self.classes.values(), key=lambda c: -c.priority))
