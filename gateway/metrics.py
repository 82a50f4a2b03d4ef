"""Prometheus metrics of the gateway, in a registry of its own (one per app, so tests never collide).

Latencies are observed once per finished request from the engine's RequestMetrics, so
/metrics, the ledger and the response `timings` all use the definitions in docs/ARCHITECTURE.md.
Gauges (running/waiting requests, KV use) are refreshed from EngineStats at scrape time: the
engine loop never does work for a metric nobody reads.

Every series carries `model_name`. Besides finserve's class-labelled series, the model-server
protocol's gauges and counters are exported under vLLM's names (`vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` as a 0-1 fraction, `vllm:prefix_cache_*`),
so an external endpoint picker or dashboard written for vLLM reads finserve unchanged.
vLLM's request histograms are exported under their names and buckets too (`vllm:time_to_first_token_seconds`,
`vllm:time_per_output_token_seconds`, `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`,
`vllm:inter_token_latency_seconds`, `vllm:request_prompt_tokens`, `vllm:request_generation_tokens`) with the
token counters `vllm:prompt_tokens_total` / `vllm:generation_tokens_total`,
`vllm:request_success_total{finished_reason}` and speculative decoding's `vllm:spec_decode_num_draft_tokens_total` /
`vllm:spec_decode_num_accepted_tokens_total` (acceptance rate: their ratio).

SLO burn rates are computed by Prometheus from `finserve_slo_requests_total` (recording rules and
multi-window alerts in deploy/prometheus/rules.yml), the standard way: a counter here, windows there.
That counter sees exactly what the ledger report counts: every final ledger row whose `slo_met` is
not None (finished, failed, capacity rejections such as 429 `queue_full` and 5xx, aborts that had
already missed a target, rows interrupted by a gateway crash), with the row's own verdict, so report
and Prometheus agree by construction (`observe_slo` is called with the row the ledger receives). Both
`slo_met` series of every class exist from the start at 0, so a class that never missed shows 100%.
It also counts what has no ledger row: a 5xx answered before the request had a class (503
`engine_not_ready` while the engine loads or is dead, a crash before classification), as a miss of
the class its route, header or key gives it without the engine, else of `unclassified`
(gateway/unclassified.py; its alert reads that class's share of all requests).
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
UNCLASSIFIED = "unclassified"  # the SLI's class of a 5xx answered before its request had one

# vLLM's buckets (vllm/engine/metrics.py), so a vLLM dashboard's quantiles read the same.
_VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                      20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_VLLM_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                      40.0, 80.0)
_VLLM_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                         240.0, 480.0, 960.0, 1920.0, 7680.0)
_VLLM_TOKEN_MAX = 1 << 20


def token_buckets(max_value: int = _VLLM_TOKEN_MAX) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_value (its build_1_2_5_buckets) for the token-count histograms."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10 ** exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


# `_created` series double the series count and no dashboard or alert here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client does not annotate it


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
        self.slo = Counter("finserve_slo_requests", "Requests counted towards the SLO (as the ledger report counts "
                           "them: finished, failed, capacity rejections, aborts past a target, interrupted) by "
                           "whether they met every target of their class (the SLI behind the burn-rate rules).",
                           [MODEL, CLASS, "slo_met"], registry=r)
        self._interrupted_seen: dict[str, int] = {}  # per class, interrupted rows already counted
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

        def vllm_hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, [MODEL], buckets=buckets, registry=r)

        self.vllm_ttft = vllm_hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                   _VLLM_TTFT_BUCKETS)
        self.vllm_tpot = vllm_hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in "
                                   "seconds.", _VLLM_TPOT_BUCKETS)
        self.vllm_itl = vllm_hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                  _VLLM_TPOT_BUCKETS)
        self.vllm_e2e = vllm_hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in "
                                  "seconds.", _VLLM_REQUEST_BUCKETS)
        self.vllm_queue = vllm_hist("vllm:request_queue_time_seconds", "Histogram of time spent waiting in the queue "
                                    "in seconds.", _VLLM_REQUEST_BUCKETS)
        self.vllm_prompt_tokens = vllm_hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                            token_buckets())
        self.vllm_generation_tokens = vllm_hist("vllm:request_generation_tokens", "Number of generation tokens "
                                                "processed.", token_buckets())
        self.vllm_prompt_total = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [MODEL],
                                         registry=r)
        self.vllm_generation_total = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                             [MODEL], registry=r)
        self.vllm_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                    [MODEL, "finished_reason"], registry=r)
        # Speculative decoding (engine/speculative/), counted per request that reached the engine as vLLM counts them
        self.vllm_spec_draft = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [MODEL],
                                       registry=r)
        self.vllm_spec_accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                          [MODEL], registry=r)
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
        # Logging that says when it fails (docs/OBSERVABILITY.md; alerts in deploy/prometheus/ledger_rules.yml).
        self.ledger_write_failures = Gauge("finserve_ledger_write_failures", "Ledger database writes that failed "
                                           "since start (the rows went to the spool).", [MODEL], registry=r)
        self.ledger_queued = Gauge("finserve_ledger_queue_rows", "Ledger rows waiting in memory for the writer "
                                   "thread.", [MODEL], registry=r)
        self.ledger_oldest = Gauge("finserve_ledger_oldest_unwritten_seconds", "Age of the oldest ledger row not yet "
                                   "in the database (spooled or in a failing write); 0 when none.", [MODEL], registry=r)
        self.evidence_written = Gauge("finserve_ledger_evidence_written", "Evidence records written with their "
                                      "ledger rows since start.", [MODEL], registry=r)
        self.evidence_failures = Gauge("finserve_ledger_evidence_failures", "Evidence that could not be sealed (no "
                                       "key) or written since start; anything above 0 is an alarm.", [MODEL],
                                       registry=r)
        self.clock_synced = Gauge("finserve_clock_synchronized", "Clock sync state recorded at start: 1 synchronised, "
                                  "0 not, -1 unknown; `source` names what said so.", [MODEL, "source"], registry=r)

    def init_classes(self, workload_classes: list[str]) -> None:
        """Create both SLI series (and the request outcomes) of every class at 0: a class that never
        missed has a `slo_met="false"` series reading 0, so its attainment is 100%, not "no data"."""
        model = self.model_name
        for name in workload_classes:
            for met in ("true", "false"):
                self.slo.labels(model, name, met)
            for outcome in ("finished", "error", "aborted", "rejected"):
                self.requests.labels(model, name, outcome)
        self.vllm_success.labels(model, "stop")
        self.vllm_success.labels(model, "length")
        self.slo.labels(model, UNCLASSIFIED, "false")  # only misses: such a request never met anything

    def observe_unclassified(self, workload_class: str, outcome: str, reason: str) -> None:
        """Count a 5xx answered before its request was classified (no ledger row, so observe_slo never sees
        it) as a miss of `workload_class`: the class known without the engine, or UNCLASSIFIED."""
        model = self.model_name
        self.slo.labels(model, workload_class, "false").inc()
        self.requests.labels(model, workload_class, outcome).inc()
        if outcome == "rejected":
            self.rejections.labels(model, workload_class, reason).inc()

    def observe_slo(self, workload_class: str, slo_met: bool | None) -> None:
        """Count one final ledger row towards the SLI; slo_met None means the ledger does not count it."""
        if slo_met is not None:
            self.slo.labels(self.model_name, workload_class, "true" if slo_met else "false").inc()

    def update_ledger(self, stats: dict[str, object]) -> None:
        model = self.model_name
        self.ledger_spool.labels(model).set(float(stats["spool_bytes"]))  # type: ignore[arg-type]
        self.ledger_lost.labels(model).set(float(stats["lost"]))  # type: ignore[arg-type]
        self.ledger_healthy.labels(model).set(1.0 if stats["healthy"] else 0.0)
        self.ledger_cycle_failures.labels(model).set(float(stats.get("cycle_failures", 0)))  # type: ignore[arg-type]
        for gauge, name in ((self.ledger_write_failures, "write_failures"), (self.ledger_queued, "queued"),
                            (self.ledger_oldest, "oldest_unwritten_s"), (self.evidence_written, "evidence_written"),
                            (self.evidence_failures, "evidence_failures")):
            gauge.labels(model).set(float(stats.get(name, 0)))  # type: ignore[arg-type]
        clock: dict[str, object] = stats.get("clock") or {}  # type: ignore[assignment]
        if clock:
            synced = clock.get("synchronized")
            self.clock_synced.labels(model, str(clock.get("source"))).set(-1.0 if synced is None else float(bool(synced)))
        interrupted: dict[str, int] = stats.get("interrupted") or {}  # type: ignore[assignment]
        for name, total in interrupted.items():  # misses in the report: misses here too
            new = total - self._interrupted_seen.get(name, 0)
            if new > 0:
                self.slo.labels(model, name, "false").inc(new)
            self._interrupted_seen[name] = total

    def observe_request(self, workload_class: str, outcome: str, m: RequestMetrics | None,
                        finish_reason: str | None = None) -> None:
        """Count one inference request that reached the engine; latencies only for completed ones.
        (Its SLI count comes from its ledger row: observe_slo.)"""
        model = self.model_name
        self.requests.labels(model, workload_class, outcome).inc()
        if m is None:
            return
        self.tokens.labels(model, workload_class, "input").inc(m.input_tokens)
        self.tokens.labels(model, workload_class, "cached").inc(m.cached_tokens)
        self.tokens.labels(model, workload_class, "output").inc(m.output_tokens)
        if m.preemptions:
            self.preemptions.labels(model, workload_class).inc(m.preemptions)
        self.vllm_prompt_total.labels(model).inc(m.input_tokens)
        self.vllm_generation_total.labels(model).inc(m.output_tokens)
        self.vllm_spec_draft.labels(model).inc(m.draft_tokens)
        self.vllm_spec_accepted.labels(model).inc(m.accepted_tokens)
        if outcome != "finished":
            return  # an aborted request's latencies would drag the distributions toward zero
        for h, vh, value in ((self.ttft, self.vllm_ttft, m.ttft_ms), (self.tpot, self.vllm_tpot, m.tpot_ms),
                             (self.e2e, self.vllm_e2e, m.e2e_ms), (self.queue, self.vllm_queue, m.queue_ms)):
            if value is not None:
                h.labels(model, workload_class).observe(value / 1000.0)
                vh.labels(model).observe(value / 1000.0)
        itl, vitl = self.itl.labels(model, workload_class), self.vllm_itl.labels(model)
        for gap in m.itl_ms:
            itl.observe(gap / 1000.0)
            vitl.observe(gap / 1000.0)
        self.vllm_prompt_tokens.labels(model).observe(m.input_tokens)
        self.vllm_generation_tokens.labels(model).observe(m.output_tokens)
        self.vllm_success.labels(model, finish_reason or "stop").inc()

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
