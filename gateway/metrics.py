"""Prometheus metrics of the gateway, in a registry of its own (one per app, so tests never collide).

Latencies are observed once per finished request from the engine's RequestMetrics, so
/metrics, the ledger and the response `timings` all use the definitions in docs/ARCHITECTURE.md.
Gauges (running/waiting requests, KV use) are refreshed from EngineStats at scrape time: the
engine loop never does work for a metric nobody reads.

Every series carries `model_name`. Besides finserve's class-labelled series, the model-server
protocol's gauges and counters are exported under vLLM's names (`vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` as a 0-1 fraction, `vllm:prefix_cache_*`),
so an external endpoint picker or dashboard written for vLLM reads finserve unchanged.
SLO burn rates are computed by Prometheus from `finserve_slo_requests_total` (recording rules and
multi-window alerts in deploy/prometheus/rules.yml), the standard way: a counter here, windows there.
"""
from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from engine.outputs import EngineStats
from engine.request import RequestMetrics

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MODEL = "model_name"
CLASS = "workload_class"

# `_created` series double the series count and no dashboard or alert here reads them.
disable_created_metrics()


class GatewayMetrics:
    def __init__(self, model_name: str = "unknown") -> None:
        self.model_name = model_name
        r = self.registry = CollectorRegistry()

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, [MODEL, CLASS], buckets=buckets, registry=r)

        self.ttft = hist("finserve_ttft_seconds", "Arrival to first output token.", _LATENCY_BUCKETS)
        self.tpot = hist("finserve_tpot_seconds", "Time per output token after the first (e2e - ttft) / (n - 1).",
                         _TOKEN_BUCKETS)
        self.itl = hist("finserve_itl_seconds", "Gap between consecutive output tokens.", _TOKEN_BUCKETS)
        self.e2e = hist("finserve_e2e_seconds", "Arrival to last output token.", _LATENCY_BUCKETS)
        self.queue = hist("finserve_queue_seconds", "Arrival to first scheduled.", _LATENCY_BUCKETS)
        self.requests = Counter("finserve_requests", "Inference requests by outcome "
                                "(finished, aborted, rejected, error).", [MODEL, CLASS, "outcome"], registry=r)
        self.rejections = Counter("finserve_rejections", "Requests refused, by reason.", [MODEL, CLASS, "reason"],
                                  registry=r)
        self.slo = Counter("finserve_slo_requests", "Finished requests by whether they met every SLO target of "
                           "their class (the SLI behind the burn-rate rules).", [MODEL, CLASS, "slo_met"],
                           registry=r)
        self.preemptions = Counter("finserve_preemptions", "Preemptions of finished requests.", [MODEL, CLASS],
                                   registry=r)
        self.tokens = Counter("finserve_tokens", "Tokens by kind: input (incl. cached), cached, output.",
                              [MODEL, CLASS, "kind"], registry=r)
        self.running = Gauge("finserve_running_requests", "Requests running in the engine.", [MODEL, CLASS],
                             registry=r)
        self.waiting = Gauge("finserve_waiting_requests", "Requests waiting (or preempted) in the engine.",
                             [MODEL, CLASS], registry=r)
        self.queue_depth = Gauge("finserve_queue_depth", "Requests waiting in the engine, all classes.", [MODEL],
                                 registry=r)
        self.kv_blocks = Gauge("finserve_kv_blocks", "KV blocks held by running requests.", [MODEL, CLASS],
                               registry=r)
        self.kv_pool = Gauge("finserve_kv_pool_blocks", "KV block pool by state (total, free, used, cached).",
                             [MODEL, "state"], registry=r)
        self.kv_usage = Gauge("finserve_kv_cache_usage_ratio", "KV blocks held by live requests / all blocks (0-1).",
                              [MODEL], registry=r)
        self.engine_failed = Gauge("finserve_engine_failed_requests", "Requests the engine failed (finish reason "
                                   "error) since start.", [MODEL], registry=r)
        self.engine_restarts = Gauge("finserve_engine_loop_restarts", "Engine loop restarts after a crash since "
                                     "start.", [MODEL], registry=r)
        # The model-server protocol (vLLM's names), for endpoint pickers and vLLM dashboards.
        self.vllm_running = Gauge("vllm:num_requests_running", "Requests in the running batch.", [MODEL], registry=r)
        self.vllm_waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", [MODEL],
                                  registry=r)
        self.vllm_kv = Gauge("vllm:kv_cache_usage_perc", "KV cache usage as a fraction, 0-1 (1 = full).", [MODEL],
                             registry=r)
        # Counters, as in vLLM; advanced by the engine's running totals at scrape time.
        self.vllm_prefix_queries = Counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix "
                                           "cache.", [MODEL], registry=r)
        self.vllm_prefix_hits = Counter("vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache.",
                                        [MODEL], registry=r)
        self._prefix_seen = (0, 0)  # (queries, hits) already counted
        self.ledger_spool = Gauge("finserve_ledger_spool_bytes", "Bytes of ledger rows waiting in the on-disk spool "
                                  "for the database (alarm when above 0 for long, or near the bound).", [MODEL],
                                  registry=r)
        self.ledger_lost = Gauge("finserve_ledger_rows_lost", "Ledger rows kept nowhere since start (spool full or "
                                 "unwritable); anything above 0 is an alarm.", [MODEL], registry=r)
        self.ledger_healthy = Gauge("finserve_ledger_database_up", "1 while the ledger database takes writes.",
                                    [MODEL], registry=r)
        self.ledger_cycle_failures = Gauge("finserve_ledger_writer_cycle_failures", "Ledger writer cycles that "
                                           "raised since start (each logged; the writer carried on).", [MODEL],
                                           registry=r)

    def update_ledger(self, stats: dict[str, object]) -> None:
        model = self.model_name
        self.ledger_spool.labels(model).set(float(stats["spool_bytes"]))  # type: ignore[arg-type]
        self.ledger_lost.labels(model).set(float(stats["lost"]))  # type: ignore[arg-type]
        self.ledger_healthy.labels(model).set(1.0 if stats["healthy"] else 0.0)
        self.ledger_cycle_failures.labels(model).set(float(stats.get("cycle_failures", 0)))  # type: ignore[arg-type]

    def observe_request(self, workload_class: str, outcome: str, m: RequestMetrics | None,
                        slo_met: bool | None = None) -> None:
        """Count one inference request that reached the engine; latencies only for completed ones."""
        model = self.model_name
        self.requests.labels(model, workload_class, outcome).inc()
        if slo_met is not None and outcome == "finished":
            self.slo.labels(model, workload_class, "true" if slo_met else "false").inc()
        if m is None:
            return
        self.tokens.labels(model, workload_class, "input").inc(m.input_tokens)
        self.tokens.labels(model, workload_class, "cached").inc(m.cached_tokens)
        self.tokens.labels(model, workload_class, "output").inc(m.output_tokens)
        if m.preemptions:
            self.preemptions.labels(model, workload_class).inc(m.preemptions)
        if outcome != "finished":
            return  # an aborted request's latencies would drag the distributions toward zero
        for h, value in ((self.ttft, m.ttft_ms), (self.tpot, m.tpot_ms), (self.e2e, m.e2e_ms),
                         (self.queue, m.queue_ms)):
            if value is not None:
                h.labels(model, workload_class).observe(value / 1000.0)
        itl = self.itl.labels(model, workload_class)
        for gap in m.itl_ms:
            itl.observe(gap / 1000.0)

    def observe_rejection(self, workload_class: str, reason: str) -> None:
        self.requests.labels(self.model_name, workload_class, "rejected").inc()
        self.rejections.labels(self.model_name, workload_class, reason).inc()

    def update_engine(self, stats: EngineStats) -> None:
        model = self.model_name
        for name, cs in stats.per_class.items():
            self.running.labels(model, name).set(cs.running)
            self.waiting.labels(model, name).set(cs.waiting)
            self.kv_blocks.labels(model, name).set(cs.kv_blocks)
        for state, value in (("total", stats.num_blocks), ("free", stats.free_blocks),
                             ("used", stats.used_blocks), ("cached", stats.cached_blocks)):
            self.kv_pool.labels(model, state).set(value)
        usage = stats.used_blocks / stats.num_blocks if stats.num_blocks else 0.0
        self.kv_usage.labels(model).set(usage)
        self.queue_depth.labels(model).set(stats.waiting)
        self.engine_failed.labels(model).set(stats.failed_requests)
        self.engine_restarts.labels(model).set(stats.loop_restarts)
        self.vllm_running.labels(model).set(stats.running)
        self.vllm_waiting.labels(model).set(stats.waiting)
        self.vllm_kv.labels(model).set(usage)
        queries, hits = stats.prefix_cache_query_tokens, stats.prefix_cache_hit_tokens
        seen_q, seen_h = self._prefix_seen
        if queries >= seen_q and hits >= seen_h:  # totals only grow (a restarted engine starts a new series)
            self.vllm_prefix_queries.labels(model).inc(queries - seen_q)
            self.vllm_prefix_hits.labels(model).inc(hits - seen_h)
        self._prefix_seen = (queries, hits)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
