"""The gateway's ledger housekeeping: the versions stamped on every row, and timeline retention.

`start(state)` is awaited by the app's lifespan before it serves: it computes the process's
versions (hashing the weights in a worker thread; a cached digest makes this instant after the
first start, see versions.py) and hands them to the ledger writer, then starts the retention task,
which drops step timelines older than FINSERVE_LEDGER_TIMELINE_RETENTION_DAYS at once and every
FINSERVE_LEDGER_RETENTION_INTERVAL_S (one cheap UPDATE on the arrival index).
"""
from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import structlog

from core.db.base import utcnow
from gateway.state import GatewayState
from ledger.retention import drop_timelines
from ledger.versions import Versions, compute_versions, loaded_weight_format

log = structlog.get_logger("finserve.ledger")

WEIGHTS_HASH_CACHE = "weights-sha256.json"


def process_versions(state: GatewayState) -> Versions:
    settings, client = state.settings, state.engine_client
    folder = Path(client.engine.config.model) if client is not None else settings.model_path
    # With replicas the gateway cannot see the format they resolved: record the configured one.
    configured = settings.weights if settings.engine_urls else None
    return compute_versions(model_id=settings.served_model_name or folder.name, model_folder=folder,
                            weight_format=loaded_weight_format(client) or configured,
                            policy_source=state.policy.source, policy=state.policy,
                            cache_file=settings.home / WEIGHTS_HASH_CACHE)


async def start(state: GatewayState) -> asyncio.Task[None]:
    try:
        state.ledger.versions = await asyncio.to_thread(process_versions, state)
    except Exception:  # rows without versions beat a gateway that does not start
        log.exception("ledger_versions_failed")
    state.ledger.weight_format_probe = lambda: loaded_weight_format(state.engine_client)
    log.info("ledger_versions", **{k: v for k, v in vars(state.ledger.versions).items()})
    return asyncio.create_task(_retention_loop(state), name="ledger-retention")


def apply_timeline_retention(state: GatewayState) -> int:
    cutoff = utcnow() - timedelta(days=state.settings.ledger_timeline_retention_days)
    with state.db.begin() as conn:
        return drop_timelines(conn, cutoff)


async def _retention_loop(state: GatewayState) -> None:
    while True:
        try:
            dropped = await asyncio.to_thread(apply_timeline_retention, state)
            if dropped:
                log.info("ledger_timelines_dropped", rows=dropped,
                         older_than_days=state.settings.ledger_timeline_retention_days)
        except Exception as exc:  # the database may be down: the next round tries again
            log.warning("ledger_retention_failed", error=str(exc)[:300])
        await asyncio.sleep(state.settings.ledger_retention_interval_s)
