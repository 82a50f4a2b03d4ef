"""The figures `finserve bench serve` reports, computed from client-side results (pure functions).

Percentiles are nearest-rank, the definition the SLO reports use (ledger/reports/percentiles.py),
so a client-side p99 can be set beside the ledger's. Which requests count towards SLO attainment
follows the ledger's rule (ledger/row.py), applied to what the client measured:
- answered (200, complete stream): met when every target of the class holds;
- failed by the service (5xx, in-band stream error, cut-off stream, no response or timeout, 429
  for a full queue): a miss;
- refused for the client's own fault (other 4xx, 429 `rate_limited`): not counted.
When the client saw no output chunk (a non-streamed answer, or an empty one) TTFT is unknown but
at most E2E, so the TTFT target is judged by E2E; TPOT is then unknown and holds vacuously, as the
ledger treats answers of one token.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from statistics import median
from typing import Any

from bench.loadgen import RequestResult
from ledger.reports.percentiles import nearest_rank, summarize
from policies import SLOTargets

CLIENT_FAULT_CODES = frozenset({"rate_limited"})
AGREEMENT_REL = 0.05  # client and ledger TTFT agree within 5% ...
AGREEMENT_ABS_MS = 5.0  # ... or 5 ms, whichever is larger


def slo_met(r: RequestResult, slo: SLOTargets) -> bool | None:
    """True met, False missed, None not counted (see the module docstring)."""
    if r.ok:
        ttft = r.ttft_ms if r.ttft_ms is not None else r.e2e_ms
        checks = ((ttft, slo.ttft_ms), (r.tpot_ms, slo.tpot_ms), (r.e2e_ms, slo.e2e_ms))
        return all(target is None or value is None or value <= target for value, target in checks)
    if r.status is None or r.status == 200 or r.status >= 500:
        return False
    if r.status == 429:
        return None if r.error_code in CLIENT_FAULT_CODES else False
    return None


def error_counts(results: Iterable[RequestResult]) -> dict[str, int]:
    """Failures by 'STATUS code' ('200 stream_incomplete', '429 queue_full', 'timeout', ...)."""
    c = Counter(str(r.error_code) if r.status is None else f"{r.status} {r.error_code}" for r in results if not r.ok)
    return dict(sorted(c.items()))


def _percentile_targets(ok: Sequence[RequestResult], slo: SLOTargets) -> dict[str, dict[str, Any]]:
    """Each target against the class's own percentile (e.g. p99 TTFT <= 1000 ms)."""
    out = {}
    for name, target in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)):
        if target is None:
            continue
        values = sorted(v for r in ok if (v := getattr(r, name)) is not None)
        value = nearest_rank(values, slo.percentile)
        out[name] = {"target": target, f"p{slo.percentile:g}": value, "met": None if value is None else value <= target}
    return out


def class_report(results: Sequence[RequestResult], slo: SLOTargets, duration_s: float) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    flags = [slo_met(r, slo) for r in results]
    met, counted = flags.count(True), sum(f is not None for f in flags)
    ledger_flags = [r.ledger["slo"]["met"] for r in results if r.ledger is not None]
    ledger_counted = [f for f in ledger_flags if f is not None]
    attainment = met / counted if counted else None
    return {
        "sent": len(results),
        "succeeded": len(ok),
        "errors": error_counts(results),
        "ttft_ms": summarize(r.ttft_ms for r in ok),
        "tpot_ms": summarize(r.tpot_ms for r in ok),
        "e2e_ms": summarize(r.e2e_ms for r in ok),
        "itl_ms": summarize(x for r in ok for x in r.itl_ms),
        "slo": {
            "targets": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "e2e_ms": slo.e2e_ms},
            "met": met, "counted": counted, "attainment": attainment,
            "attainment_goal": slo.attainment_goal,
            "goal_met": None if attainment is None else attainment >= slo.attainment_goal,
            "percentile_targets": _percentile_targets(ok, slo),
            "ledger_attainment": (ledger_counted.count(True) / len(ledger_counted)) if ledger_counted else None,
        },
        "goodput_rps": met / duration_s,
        "input_tokens_per_s": sum(r.input_tokens or 0 for r in ok) / duration_s,
        "cached_input_tokens": sum(r.cached_tokens or 0 for r in ok),
        "output_tokens_per_s": sum(r.output_tokens or 0 for r in ok) / duration_s,
    }


def agrees(client_ms: float, ledger_ms: float) -> bool:
    return abs(client_ms - ledger_ms) <= max(AGREEMENT_REL * ledger_ms, AGREEMENT_ABS_MS)


def ttft_agreement(pairs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Client-side vs ledger TTFT over (client_ms, ledger_ms) pairs of the same requests.

    The client's interval contains the server's (it starts before the gateway's arrival stamp
    and ends after the first chunk has crossed the socket), so the difference is the cost of
    HTTP, routing and SSE framing on both sides, and should be positive and small.
    """
    if not pairs:
        return {"count": 0}
    client, ledger = [c for c, _ in pairs], [l for _, l in pairs]
    diffs = sorted(c - l for c, l in pairs)
    medians = (median(client), median(ledger))
    return {
        "count": len(pairs),
        "client_median_ms": medians[0],
        "ledger_median_ms": medians[1],
        "diff_ms": {"median": median(diffs), "p99": nearest_rank(diffs, 99.0), "min": diffs[0], "max": diffs[-1]},
        "share_within": sum(agrees(c, l) for c, l in pairs) / len(pairs),
        "rule": f"|client - ledger| <= max({AGREEMENT_REL:.0%} of ledger, {AGREEMENT_ABS_MS:g} ms)",
        "medians_within": agrees(*medians),
    }


def ttft_pairs(results: Iterable[RequestResult]) -> list[tuple[float, float]]:
    return [(r.ttft_ms, r.ledger["timings"]["ttft_ms"]) for r in results
            if r.ok and r.ttft_ms is not None and r.ledger is not None and r.ledger["timings"]["ttft_ms"] is not None]


def lateness_ms(results: Sequence[RequestResult]) -> dict[str, Any]:
    """How late requests left against their schedule: large values mean the client could not keep up."""
    late = sorted((r.sent_s - r.scheduled_s) * 1e3 for r in results)
    return {"p50": nearest_rank(late, 50.0), "p99": nearest_rank(late, 99.0), "max": late[-1] if late else None}
