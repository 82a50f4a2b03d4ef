"""Background ledger writer: batched, idempotent inserts, never on a request's critical path.

Contract:
- `submit(row)` never blocks and never raises. It puts the row on a bounded
  in-memory queue; if that queue is full the row goes straight to the spool file.
- The writer thread takes up to `batch_size` rows at a time (waiting at most
  `flush_interval_s` for more) and inserts them in one transaction.
- If the database is down, rows stay in memory (`max_pending` at most; older rows
  beyond that move to the on-disk NDJSON spool) and are retried every
  `retry_interval_s`. Once a write succeeds, the spool is replayed.
- Inserts skip request ids already present (INSERT ... ON CONFLICT DO NOTHING),
  so a replayed spool or a retried batch never duplicates a row.
- `close()` writes everything still queued; what the database will not take is
  spooled, and the next writer on the same spool path replays it.
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Engine, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from core.db.models import RequestLedger
from gateway.ledger.row import LedgerRow
from gateway.ledger.spool import Spool

log = structlog.get_logger("finserve.ledger")

DEFAULT_SPOOL_NAME = "ledger-spool.ndjson"


class _Flush:
    """Queue marker: set once every row submitted before it has been handled."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ok = False


class LedgerWriter:
    def __init__(
        self,
        engine: Engine,
        *,
        spool_path: Path,
        max_queue: int = 10_000,
        max_pending: int = 50_000,
        batch_size: int = 500,
        flush_interval_s: float = 0.2,
        retry_interval_s: float = 2.0,
    ) -> None:
        self.engine = engine
        self.spool = Spool(spool_path)
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.flush_interval_s = flush_interval_s
        self.retry_interval_s = retry_interval_s
        self._queue: queue.Queue[LedgerRow | _Flush] = queue.Queue(maxsize=max_queue)
        self._pending: list[LedgerRow] = []  # writer thread only: rows the database has not taken yet
        self._next_try = 0.0  # monotonic time before which a failed database is not retried
        self._stopping = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self.written = 0  # rows handed to the database (duplicates skipped by it included)
        self.spooled = 0  # rows appended to the spool file
        self.healthy = True  # False while the database is refusing writes

    # ---- caller side ----
    def start(self) -> "LedgerWriter":
        self._thread.start()
        return self

    def submit(self, row: LedgerRow) -> None:
        try:
            if self._closed:
                self._spool_rows([row])
                return
            self._queue.put_nowait(row)
        except queue.Full:
            self._spool_rows([row])
        except Exception:  # never let the ledger break a request
            log.exception("ledger_submit_failed", request_id=getattr(row, "request_id", None))

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every row submitted so far was handled; True if all of it is in the database."""
        if not self._thread.is_alive():
            return False
        marker = _Flush()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.event.wait(timeout) and marker.ok

    def close(self, timeout: float = 30.0) -> None:
        """Write (or, if the database is down, spool) everything; later submits go to the spool."""
        if self._closed:
            return
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._closed = True
        # Rows that raced with the thread's last drain, or everything if it is stuck: spool them.
        leftovers = self._drain(block=False)[0]
        if not self._thread.is_alive():
            leftovers = self._pending + leftovers
            self._pending = []
        self._spool_rows(leftovers)

    def stats(self) -> dict[str, Any]:
        return {"queued": self._queue.qsize(), "pending": len(self._pending), "written": self.written,
                "spooled": self.spooled, "healthy": self.healthy}

    # ---- writer thread ----
    def _run(self) -> None:
        while True:
            stopping = self._stopping.is_set()
            rows, markers = self._drain(block=not stopping)
            self._pending.extend(rows)
            # On shutdown, one more attempt unless the database just refused; the rest is spooled.
            force = bool(markers) or (stopping and self.healthy)
            if (self._pending or self.spool.has_data()) and (force or time.monotonic() >= self._next_try):
                self._write_all()
            self._bound_memory(spill_all=stopping and not self.healthy)
            done = not self._pending and not self.spool.has_data()
            for m in markers:
                m.ok = done
                m.event.set()
            if stopping and self._queue.empty():
                return

    def _drain(self, *, block: bool) -> tuple[list[LedgerRow], list[_Flush]]:
        rows: list[LedgerRow] = []
        markers: list[_Flush] = []
        try:
            item = self._queue.get(timeout=self.flush_interval_s) if block else self._queue.get_nowait()
            while True:
                (markers if isinstance(item, _Flush) else rows).append(item)  # type: ignore[arg-type]
                if len(rows) >= self.batch_size or markers:
                    break
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return rows, markers

    def _write_all(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self.batch_size]
                self._insert_safe(batch)
                del self._pending[: len(batch)]
            replayed = self.spool.replay(self._insert_safe, self.batch_size)
            if replayed:
                log.info("ledger_spool_replayed", rows=replayed)
            if not self.healthy:
                log.info("ledger_database_back")
            self.healthy = True
        except Exception as exc:
            if self.healthy:
                log.warning("ledger_database_unavailable", error=str(exc)[:300], pending=len(self._pending))
            self.healthy = False
            self._next_try = time.monotonic() + self.retry_interval_s

    def _insert_safe(self, rows: list[LedgerRow]) -> None:
        """Insert rows; raise only when the database is unavailable.

        A row the database refuses on its own (too long a value, a constraint) must
        not hold up every row behind it: the batch is retried row by row and a
        refused row is logged and kept in the dead-letter file `<spool>.rejected`.
        """
        try:
            self._insert(rows)
        except Exception as exc:
            if _is_outage(exc):
                raise
            if len(rows) > 1:
                for row in rows:
                    self._insert_safe([row])
                return
            log.error("ledger_row_rejected", request_id=rows[0].request_id, error=str(exc)[:300])
            Spool(self.spool.path.with_name(self.spool.path.name + ".rejected")).append(rows)

    def _insert(self, rows: list[LedgerRow]) -> None:
        """Insert rows in one transaction, skipping request ids already in the table."""
        by_id: dict[str, dict[str, Any]] = {}
        for r in rows:
            by_id.setdefault(r.request_id, r.to_dict())  # first row of an id wins
        unique = list(by_id.values())
        table = RequestLedger.__table__
        with self.engine.begin() as conn:
            dialect = conn.dialect.name
            if dialect in ("postgresql", "sqlite"):
                ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
                conn.execute(ins.on_conflict_do_nothing(index_elements=["request_id"]), unique)
            else:  # portable fallback: one writer per database makes check-then-insert safe enough
                ids = [r["request_id"] for r in unique]
                have = set(conn.scalars(select(table.c.request_id).where(table.c.request_id.in_(ids))))
                fresh = [r for r in unique if r["request_id"] not in have]
                if fresh:
                    conn.execute(insert(table), fresh)
        self.written += len(unique)

    def _bound_memory(self, *, spill_all: bool) -> None:
        keep = 0 if spill_all else self.max_pending
        if len(self._pending) > keep:
            spill = self._pending[: len(self._pending) - keep]  # oldest first to disk
            self._spool_rows(spill)
            del self._pending[: len(spill)]

    def _spool_rows(self, rows: list[LedgerRow]) -> None:
        if not rows:
            return
        try:
            self.spool.append(rows)
            self.spooled += len(rows)
        except Exception:
            log.exception("ledger_spool_failed", rows=len(rows))


def _is_outage(exc: BaseException) -> bool:
    """True for 'the database is not there' (retry later), False for 'this row is bad'."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    if isinstance(exc, SQLAlchemyError):
        return bool(getattr(exc, "connection_invalidated", False))
    return not isinstance(exc, (TypeError, ValueError))
