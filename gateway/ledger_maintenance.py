"""The gateway's ledger housekeeping: versions, evidence key, change records, retention.

`start(state)` is awaited by the app's lifespan before it serves: it computes the process's
versions (hashing the weights in a worker thread; a cached digest makes this instant after the
first start, see versions.py) and hands them to the ledger writer with the evidence keyring, records
the start (versions, clock-sync state, what changed since the last start) as chained ledger events,
then starts the retention task, which drops step timelines older than
FINSERVE_LEDGER_TIMELINE_RETENTION_DAYS and deletes evidence past its class's retention, at once and
every FINSERVE_LEDGER_RETENTION_INTERVAL_S (one cheap UPDATE / DELETE on an index each), and on each round
(and at a clean stop) chains a `heads` event when a tenant's head moved since the last one
(ledger/anchors.py): rows deleted later, with their head moved back, contradict it.
"""
from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import structlog

from core.db.base import utcnow
from engine.engine import LLMEngine
from engine.fingerprint import engine_fingerprint
from gateway.state import GatewayState
from ledger.anchors import record_heads_now
from ledger.changes import record_start
from ledger.clock import clock_state
from ledger.evidence import load_keyring
from ledger.evidence_store import expire
from ledger.retention import drop_timelines
from ledger.versions import Versions, compute_versions, loaded_weight_format

log = structlog.get_logger("finserve.ledger")

WEIGHTS_HASH_CACHE = "weights-sha256.json"


def process_versions(state: GatewayState) -> Versions:
    settings, client = state.settings, state.engine_client
    folder = Path(client.engine.config.model) if client is not None else settings.model_path
    # With replicas the gateway cannot see the format they resolved: record the configured one.
    configured = settings.weights if settings.engine_urls else None
    return compute_versions(model_id=settings.model_id(folder), model_folder=folder,
                            weight_format=loaded_weight_format(client) or configured,
                            policy_source=state.policy.source, policy=state.policy,
                            cache_file=settings.home / WEIGHTS_HASH_CACHE)


def _hmac_key(state: GatewayState) -> bytes | None:
    key = state.settings.ledger_hmac_key
    return key.get_secret_value().encode() if key is not None and key.get_secret_value() else None


def _record_start(state: GatewayState) -> None:
    clock = clock_state()
    state.ledger.clock = clock
    events = record_start(state.ledger.engine, state.ledger.versions, clock, gateway=state.ledger.gateway_id,
                          hmac_key=_hmac_key(state))
    log.info("ledger_start_recorded", events=[e["kind"] for e in events], clock_source=clock["source"],
             clock_synchronized=clock["synchronized"])


async def start(state: GatewayState) -> asyncio.Task[None]:
    try:
        state.ledger.versions = await asyncio.to_thread(process_versions, state)
    except Exception:  # rows without versions beat a gateway that does not start
        log.exception("ledger_versions_failed")
    state.ledger.weight_format_probe = lambda: loaded_weight_format(state.engine_client)
    local = getattr(state.engine_client, "engine", None)  # the embedded engine (replicas keep their own)
    if isinstance(local, LLMEngine):
        state.ledger.evidence.engine_fingerprint = engine_fingerprint(local)
    log.info("ledger_versions", **vars(state.ledger.versions))
    key = state.settings.evidence_key
    try:
        state.ledger.keyring = load_keyring(key.get_secret_value() if key else None, state.settings.home, create=True)
    except Exception:  # evidence is then dropped, each counted in finserve_ledger_evidence_failures
        log.exception("ledger_evidence_key_unusable")
    try:
        await asyncio.to_thread(_record_start, state)
    except Exception as exc:  # the database may be down: the start goes unrecorded, loudly
        log.error("ledger_start_unrecorded", error=str(exc)[:300])
    return asyncio.create_task(_retention_loop(state), name="ledger-retention")


def apply_timeline_retention(state: GatewayState) -> int:
    cutoff = utcnow() - timedelta(days=state.settings.ledger_timeline_retention_days)
    with state.db.begin() as conn:
        return drop_timelines(conn, cutoff)


def apply_evidence_retention(state: GatewayState) -> int:
    with state.db.begin() as conn:
        return len(expire(conn, utcnow(), hmac_key=_hmac_key(state)).erased)


def record_round(state: GatewayState, reason: str = "round") -> int:
    """Chain a `heads` event if a head moved since the last record; returns the events written."""
    return len(record_heads_now(state.db, reason, _hmac_key(state)))


def record_stop(state: GatewayState) -> None:
    try:
        record_round(state, "stop")
    except Exception as exc:  # the database may be down: the next start records the heads
        log.warning("ledger_heads_unrecorded", error=str(exc)[:300])


async def _retention_loop(state: GatewayState) -> None:
    while True:
        try:
            dropped = await asyncio.to_thread(apply_timeline_retention, state)
            if dropped:
                log.info("ledger_timelines_dropped", rows=dropped,
                         older_than_days=state.settings.ledger_timeline_retention_days)
            expired = await asyncio.to_thread(apply_evidence_retention, state)
            if expired:
                log.info("ledger_evidence_expired", requests=expired)
            await asyncio.to_thread(record_round, state)
        except Exception as exc:  # the database may be down: the next round tries again
            log.warning("ledger_retention_failed", error=str(exc)[:300])
        await asyncio.sleep(state.settings.ledger_retention_interval_s)
