"""Background ledger writer: batched, idempotent upserts, durable before the caller is told so.

Contract:
- `submit(row)` never blocks and never raises. It returns a Future that resolves once the row is
  durable: True when it is in the database, False when it is in the fsynced on-disk spool; it fails
  (SpoolFull, a disk error) only when the row could be kept nowhere. Callers that must not answer
  before their row is safe (the write-ahead `running` row, a final row) wait for it; others need not.
- The writer thread takes up to `batch_size` rows at a time, as soon as they arrive (group commit:
  rows that arrive during a write go in the next one), and upserts them in one transaction.
- When the database refuses a write, that batch goes to the spool at once (fsync), and so does every
  row until `retry_interval_s` has passed; then the database is tried again and the spool replayed.
  Nothing waits in memory for the database, so kill -9 at any moment loses no durable row.
- Rows of one request may arrive in any order (spool replays, retries): `replaces()` decides, so a
  final status always wins over `running`/`interrupted` and nothing else is ever overwritten.
- `recover(gateway_id, started_at)`: rows a previous run of this gateway left `running` become
  `interrupted`, in the spool at once and in the database as soon as it answers (only rows older than
  this run, so the current run's requests are never touched).
- `close()` writes everything still queued; later submits go to the spool.
- Every row gets this process's `versions` (when it has none) and the replica columns from its
  placement; a row reaching a final status is chained at its tenant's head in the transaction that
  writes it (ledger/chain.py), so a replayed or duplicate row never takes a second position.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import structlog
from sqlalchemy import Engine, Table, select

from core.db.models import RUNNING_STATUS, RequestLedger
from ledger import chain
from ledger.evidence import Evidence, Keyring
from ledger.evidence_capture import EvidenceBook
from ledger.evidence_store import insert_evidence
from ledger.row import LedgerRow, interrupted_row, replaces, with_placement
from ledger.spool import Spool, SpoolFull
from ledger.upsert import is_outage as _is_outage
from ledger.upsert import resolve as _resolve
from ledger.upsert import write_values as _write_values
from ledger.versions import Versions

log = structlog.get_logger("finserve.ledger")

DEFAULT_SPOOL_NAME = "ledger-spool.ndjson"
DEFAULT_MAX_SPOOL_BYTES = 1 << 30
_Item = tuple[LedgerRow, "Future[bool]"]
_TABLE = cast(Table, RequestLedger.__table__)


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
        batch_size: int = 500,
        flush_interval_s: float = 0.2,
        retry_interval_s: float = 2.0,
        max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
        gateway_id: str = "",
    ) -> None:
        self.engine = engine
        self.spool = Spool(spool_path, max_bytes=max_spool_bytes)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_interval_s = retry_interval_s
        self.gateway_id = gateway_id  # written into running rows' timeline, so a restart finds its own
        # What serves this process's requests (model, weights, policy, finserve); set once known, stamped on rows.
        self.versions = Versions()
        # Asked while versions.weight_format is unknown: the embedded engine resolves it when it has loaded.
        self.weight_format_probe: Callable[[], str | None] | None = None
        self._queue: queue.Queue[_Item | _Flush] = queue.Queue(maxsize=max_queue)
        self._next_try = 0.0  # monotonic time before which a failed database is not retried
        self._recovery: datetime | None = None  # set: running rows older than this are to be interrupted
        self._stopping = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self.written = 0  # rows handed to the database (duplicates skipped by it included)
        self.spooled = 0  # rows appended to the spool file
        self.lost = 0  # rows kept nowhere (spool full or unwritable): each one is logged as an error
        self.healthy = True  # False while the database is refusing writes
        self.cycle_failures = 0  # writer cycles that raised (each logged); the thread carried on
        # Rows this process turned `interrupted` (the previous run died with them in flight), by class:
        # they count as misses in the reports, so the Prometheus SLI counts them too (GatewayMetrics).
        self.interrupted: Counter[str] = Counter()
        # Seals the evidence of rows that carry some (ledger/evidence.py); None: such evidence is dropped,
        # each time counted and logged as an evidence failure.
        self.keyring: Keyring | None = None
        self.evidence = EvidenceBook()  # captures of requests in flight (the gateway's hooks fill them)
        self.clock: dict[str, Any] = {}  # the clock-sync state recorded at start (ledger/clock.py)
        self.evidence_written = 0
        self.evidence_failures = 0  # evidence that could not be sealed (no key) or written (a refused row)
        self.write_failures = 0  # database writes that failed (each batch then went to the spool)
        self._unwritten_since: float | None = None  # wall time of the oldest row not yet in the database
        self._writing_since: float | None = None  # wall time the database write in progress began

    # ---- caller side ----
    def start(self) -> LedgerWriter:
        self._thread.start()
        return self

    def recover(self, started_at: float) -> int:
        """Interrupt what a previous run left `running` (call before start()); returns rows spooled as such."""
        at = datetime.fromtimestamp(started_at, UTC)
        self._recovery = at
        stale = [interrupted_row(r, at=started_at) for r in self.spool.unfinished()
                 if r.arrival_at < at and (r.timeline or {}).get("gateway") == self.gateway_id]
        self._spool_rows(stale)
        self.interrupted.update(r.workload_class for r in stale)
        return len(stale)

    def submit(self, row: LedgerRow) -> Future[bool]:
        done: Future[bool] = Future()
        try:
            row = self._stamp(row)
            if row.status != RUNNING_STATUS and row.evidence is None:
                cap = self.evidence.pop(row.request_id)
                if cap is not None:
                    row.evidence = cap.evidence(row.status, row.finish_reason)
            if self._closed:
                self._keep([(row, done)])
            else:
                self._queue.put_nowait((row, done))
        except queue.Full:
            self._keep([(row, done)])
        except Exception as exc:  # never let the ledger break a request
            log.exception("ledger_submit_failed", request_id=getattr(row, "request_id", None))
            _resolve(done, exc=exc)
        return done

    def _stamp(self, row: LedgerRow) -> LedgerRow:
        if self.versions.weight_format is None and self.weight_format_probe is not None:
            fmt = self.weight_format_probe()
            if fmt is not None:
                self.versions = dataclasses.replace(self.versions, weight_format=fmt)
        return self.versions.stamp(with_placement(row))

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
        self._keep(self._drain(block=False)[0])  # rows that raced with the thread's last drain

    def stats(self) -> dict[str, Any]:
        return {"queued": self._queue.qsize(), "written": self.written, "spooled": self.spooled,
                "lost": self.lost, "spool_bytes": self.spool.size_bytes(), "healthy": self.healthy,
                "cycle_failures": self.cycle_failures, "alive": self._thread.is_alive(),
                "interrupted": dict(self.interrupted), "write_failures": self.write_failures,
                "evidence_written": self.evidence_written, "evidence_failures": self.evidence_failures,
                "oldest_unwritten_s": self.oldest_unwritten_s(), "clock": self.clock}

    def oldest_unwritten_s(self) -> float:
        """Seconds the oldest row not yet in the database has waited (spooled or in a failing write); 0: none."""
        since = self._unwritten_since
        if since is None and self.spool.has_data():
            since = self._unwritten_since = time.time()  # a spool left by an earlier run: counted from now
        starts = [t for t in (since, self._writing_since) if t is not None]  # a write that hangs counts too
        return max(0.0, time.time() - min(starts)) if starts else 0.0

    # ---- writer thread ----
    def _run(self) -> None:
        """One cycle after another until close(); a cycle that fails is logged and the next one runs:
        the writer thread outlives any single bad cycle, or every later row would wait on it forever."""
        while True:
            try:
                if self._cycle():
                    return
            except Exception:
                self.cycle_failures += 1
                log.exception("ledger_writer_cycle_failed")
                # a pause before the next try; while closing, each failed cycle still drained the queue
                if self._stopping.wait(min(self.retry_interval_s, 1.0)) and self._queue.empty():
                    return

    def _cycle(self) -> bool:
        stopping = self._stopping.is_set()
        items, markers = self._drain(block=not stopping)
        try:
            if items:
                self._write(items, force=stopping)
            if (self.spool.has_data() or self._recovery is not None) and (markers or self._may_try()):
                self._catch_up()
        except Exception:
            self._keep(items)  # spooled (or lost, loudly) and settled: none of their requests waits forever
            raise
        finally:
            done = not self.spool.has_data() and self._recovery is None
            for m in markers:
                m.ok = done
                m.event.set()
        return stopping and self._queue.empty()

    def _may_try(self) -> bool:
        return self.healthy or time.monotonic() >= self._next_try

    def _drain(self, *, block: bool) -> tuple[list[_Item], list[_Flush]]:
        items: list[_Item] = []
        markers: list[_Flush] = []
        try:
            item = self._queue.get(timeout=self.flush_interval_s) if block else self._queue.get_nowait()
            while True:
                if isinstance(item, _Flush):
                    markers.append(item)
                    break
                items.append(item)
                if len(items) >= self.batch_size:
                    break
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return items, markers

    def _seal(self, items: list[_Item]) -> None:
        """Hash and encrypt the plain evidence of `items` in place (writer thread, or a submit that spools)."""
        for row, _ in items:
            if not isinstance(row.evidence, Evidence):
                continue
            if self.keyring is None:
                self.evidence_failures += 1
                log.error("ledger_evidence_dropped", request_id=row.request_id, reason="no evidence key")
                row.evidence = None
                continue
            sealed = self.keyring.seal(row.request_id, row.evidence)
            row.evidence, row.input_sha256, row.output_sha256 = sealed, sealed.input_sha256, sealed.output_sha256

    def _write(self, items: list[_Item], *, force: bool = False) -> None:
        """Into the database if it may be tried, else (or when it refuses) into the spool at once."""
        self._seal(items)
        if force or self._may_try():
            self._writing_since = time.time()
            try:
                self._insert_safe([row for row, _ in items])
            except Exception as exc:
                self.write_failures += 1
                self._outage(exc)
            else:
                self._back()
                for _, done in items:
                    _resolve(done, True)
                return
            finally:
                self._writing_since = None
        self._keep(items)

    def _catch_up(self) -> None:
        """Replay the spool, then interrupt what a previous run left running (in that order: a spooled
        final row must land before its request is judged interrupted)."""
        try:
            replayed = self.spool.replay(self._insert_safe, self.batch_size)
            if replayed:
                log.info("ledger_spool_replayed", rows=replayed)
            if self._recovery is not None:
                n = self._interrupt_running(self._recovery)
                self._recovery = None
                if n:
                    log.warning("ledger_rows_interrupted", rows=n, gateway=self.gateway_id)
            self._back()
        except Exception as exc:
            self.write_failures += 1
            self._outage(exc)

    def _outage(self, exc: BaseException) -> None:
        if self.healthy:
            log.warning("ledger_database_unavailable", error=str(exc)[:300])
        self.healthy = False
        self._next_try = time.monotonic() + self.retry_interval_s

    def _back(self) -> None:
        if not self.healthy:
            log.info("ledger_database_back")
        self.healthy = True
        if not self.spool.has_data():
            self._unwritten_since = None

    def _keep(self, items: list[_Item]) -> None:
        """Spool rows (fsync) and resolve their futures; a row kept nowhere is an error, loudly."""
        if not items:
            return
        self._seal(items)
        try:
            self._spool_rows([row for row, _ in items], raise_errors=True)
        except SpoolFull:
            if len(items) > 1:  # near the bound: keep as many rows as still fit
                for item in items:
                    self._keep([item])
                return
            self._lose(items, SpoolFull(f"ledger spool is full ({self.spool.max_bytes} bytes)"))
            return
        except Exception as exc:
            self._lose(items, exc)
            return
        for _, done in items:
            _resolve(done, False)

    def _lose(self, items: list[_Item], exc: Exception) -> None:
        self.lost += len(items)
        log.error("ledger_rows_lost", rows=len(items), error=str(exc)[:300],
                  request_ids=[row.request_id for row, _ in items][:20])
        for _, done in items:
            _resolve(done, exc=exc)

    def _spool_rows(self, rows: list[LedgerRow], *, raise_errors: bool = False) -> None:
        if not rows:
            return
        try:
            self.spool.append(rows)
            self.spooled += len(rows)
            if self._unwritten_since is None:
                self._unwritten_since = time.time()
        except Exception:
            if raise_errors:
                raise
            log.exception("ledger_spool_failed", rows=len(rows))

    def _insert_safe(self, rows: list[LedgerRow]) -> None:
        """Upsert rows; raise only when the database is unavailable.

        A row the database refuses on its own (too long a value, a constraint) must
        not hold up every row behind it: the batch is retried row by row and a
        refused row is logged and kept in the dead-letter file `<spool>.rejected`.
        """
        try:
            self._upsert(rows)
        except Exception as exc:
            if _is_outage(exc):
                raise
            if len(rows) > 1:
                for row in rows:
                    self._insert_safe([row])
                return
            log.error("ledger_row_rejected", request_id=rows[0].request_id, error=str(exc)[:300])
            self.evidence_failures += rows[0].evidence is not None
            Spool(self.spool.path.with_name(self.spool.path.name + ".rejected")).append(rows)

    def _upsert(self, rows: list[LedgerRow]) -> None:
        """One transaction: new request ids are inserted; an existing row is replaced only as `replaces()` says."""
        by_id: dict[str, LedgerRow] = {}
        for r in rows:
            kept = by_id.get(r.request_id)
            if kept is None or replaces(r.status, kept.status):
                by_id[r.request_id] = r
        with self.engine.begin() as conn:
            # Locks the heads of the tenants with final rows first: on SQLite that write takes the database's
            # write lock, so the statuses read next cannot change before this transaction commits.
            written = chain.extend(conn, list(by_id.values()))
            if written:
                _write_values(conn, [r.to_dict() for r in written])
            n_evidence = insert_evidence(conn, written)
        self.written += len(by_id)
        self.evidence_written += n_evidence

    def _interrupt_running(self, before: datetime) -> int:
        """Rows of this gateway left `running` by an earlier run become `interrupted`."""
        table = _TABLE
        with self.engine.begin() as conn:
            stale = conn.execute(select(table).where(table.c.status == RUNNING_STATUS,
                                                     table.c.arrival_at < before)).mappings().all()
        mine = [LedgerRow(**dict(r)) for r in stale if (r["timeline"] or {}).get("gateway") == self.gateway_id]
        if mine:
            self._upsert([interrupted_row(r, at=before.timestamp()) for r in mine])
            self.interrupted.update(r.workload_class for r in mine)
        return len(mine)
