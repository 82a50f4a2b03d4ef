"""Prometheus metrics of the gateway, in a registry of its own (one per app, so tests never collide).

Latencies are observed once per finished request from the engine's RequestMetrics, so
/metrics, the ledger and the response `timings` all use the definitions in DESIGN.md.
Gauges of running/waiting requests and KV blocks are refreshed from EngineStats at scrape
time: the engine loop never does work for a metric nobody reads.
"""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.outputs import EngineStats
from engine.request import RequestMetrics

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CLASS = "workload_class"


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.ttft = Histogram("finserve_ttft_seconds", "Arrival to first output token.", [CLASS],
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("finserve_tpot_seconds", "Time per output token after the first (e2e - ttft) / (n - 1).",
                              [CLASS], buckets=_TOKEN_BUCKETS, registry=r)
        self.itl = Histogram("finserve_itl_seconds", "Gap between consecutive output tokens.", [CLASS],
                             buckets=_TOKEN_BUCKETS, registry=r)
        self.e2e = Histogram("finserve_e2e_seconds", "Arrival to last output token.", [CLASS],
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("finserve_queue_seconds", "Arrival to first scheduled.", [CLASS],
                               buckets=_LATENCY_BUCKETS, registry=r)
        self.requests = Counter("finserve_requests", "Inference requests by outcome "
                                "(finished, aborted, rejected, error).", [CLASS, "outcome"], registry=r)
        self.rejections = Counter("finserve_rejections", "Requests refused, by reason.", [CLASS, "reason"], registry=r)
        self.preemptions = Counter("finserve_preemptions", "Preemptions of finished requests.", [CLASS], registry=r)
        self.tokens = Counter("finserve_tokens", "Tokens by kind: input (incl. cached), cached, output.",
                              [CLASS, "kind"], registry=r)
        self.running = Gauge("finserve_running_requests", "Requests running in the engine.", [CLASS], registry=r)
        self.waiting = Gauge("finserve_waiting_requests", "Requests waiting (or preempted) in the engine.", [CLASS],
                             registry=r)
        self.kv_blocks = Gauge("finserve_kv_blocks", "KV blocks held by running requests.", [CLASS], registry=r)
        self.kv_pool = Gauge("finserve_kv_pool_blocks", "KV block pool by state (total, free, used, cached).",
                             ["state"], registry=r)

        self.ledger_spool = Gauge("finserve_ledger_spool_bytes", "Bytes of ledger rows waiting in the on-disk spool "
                                  "for the database (alarm when above 0 for long, or near the bound).", registry=r)
        self.ledger_lost = Gauge("finserve_ledger_rows_lost", "Ledger rows kept nowhere since start (spool full or "
                                 "unwritable); anything above 0 is an alarm.", registry=r)
        self.ledger_healthy = Gauge("finserve_ledger_database_up", "1 while the ledger database takes writes.",
                                    registry=r)

    def update_ledger(self, stats: dict[str, object]) -> None:
        self.ledger_spool.set(float(stats["spool_bytes"]))  # type: ignore[arg-type]
        self.ledger_lost.set(float(stats["lost"]))  # type: ignore[arg-type]
        self.ledger_healthy.set(1.0 if stats["healthy"] else 0.0)

    def observe_request(self, workload_class: str, outcome: str, m: RequestMetrics | None) -> None:
        """Count one inference request that reached the engine; latencies only for completed ones."""
        self.requests.labels(workload_class, outcome).inc()
        if m is None:
            return
        self.tokens.labels(workload_class, "input").inc(m.input_tokens)
        self.tokens.labels(workload_class, "cached").inc(m.cached_tokens)
        self.tokens.labels(workload_class, "output").inc(m.output_tokens)
        if m.preemptions:
            self.preemptions.labels(workload_class).inc(m.preemptions)
        if outcome != "finished":
            return  # an aborted request's latencies would drag the distributions toward zero
        for hist, value in ((self.ttft, m.ttft_ms), (self.tpot, m.tpot_ms), (self.e2e, m.e2e_ms),
                            (self.queue, m.queue_ms)):
            if value is not None:
                hist.labels(workload_class).observe(value / 1000.0)
        itl = self.itl.labels(workload_class)
        for gap in m.itl_ms:
            itl.observe(gap / 1000.0)

    def observe_rejection(self, workload_class: str, reason: str) -> None:
        self.requests.labels(workload_class, "rejected").inc()
        self.rejections.labels(workload_class, reason).inc()

    def update_engine(self, stats: EngineStats) -> None:
        for name, cs in stats.per_class.items():
            self.running.labels(name).set(cs.running)
            self.waiting.labels(name).set(cs.waiting)
            self.kv_blocks.labels(name).set(cs.kv_blocks)
        for state, value in (("total", stats.num_blocks), ("free", stats.free_blocks),
                             ("used", stats.used_blocks), ("cached", stats.cached_blocks)):
            self.kv_pool.labels(state).set(value)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
