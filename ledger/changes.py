"""Change records at start: a `start` event with the versions and clock state, one change event per
version that differs from the last recorded start's (ledger/events.py), all in one transaction. The start
also records every tenant's head and last checkpoint (ledger/anchors.py)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from ledger.anchors import snapshot
from ledger.events import append_events, change_events, last_start
from ledger.versions import Versions


def record_start(engine: Engine, versions: Versions, clock: dict[str, Any], *, gateway: str,
                 hmac_key: bytes | None = None) -> list[dict[str, Any]]:
    """Chain this start (and what changed since the last one); returns the events written."""
    now = dict(vars(versions))
    with engine.begin() as conn:
        changes = change_events(last_start(conn), now)
        start = ("start", None, {**now, "clock": clock, "gateway": gateway, **snapshot(conn)})
        return append_events(conn, [*changes, start], hmac_key)
