"""On-disk NDJSON spool for ledger rows the database could not take.

Every append is fsynced before it returns: a row in the spool survives kill -9. The spool is bounded
(`max_bytes`); an append past the bound raises SpoolFull and the caller decides what that means
(the gateway refuses new requests rather than serve them unrecorded).

Appends go to `<path>`; a replay first renames it to `<path>.replaying`, so new
appends never race with the rows being replayed. A replay that fails half way
leaves `.replaying` in place and is simply run again: inserts are idempotent on
request_id, so replaying a row twice never duplicates it.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import structlog

from ledger.row import LedgerRow, replaces

log = structlog.get_logger("finserve.ledger")


class SpoolFull(OSError):
    """The spool reached its size bound; the row was not written."""


class Spool:
    def __init__(self, path: Path, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.replaying = self.path.with_name(self.path.name + ".replaying")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # serialises appends from submit() and the writer thread

    def has_data(self) -> bool:
        return self.path.exists() or self.replaying.exists()

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path, self.replaying) if p.exists())

    def append(self, rows: Sequence[LedgerRow]) -> None:
        """Append rows durably (fsync): the spool only exists for the case where things already went wrong."""
        if not rows:
            return
        data = "".join(json.dumps(r.to_json_dict(), separators=(",", ":")) + "\n" for r in rows)
        with self._lock:
            if self.max_bytes is not None and self.size_bytes() + len(data.encode()) > self.max_bytes:
                raise SpoolFull(f"ledger spool {self.path} would exceed {self.max_bytes} bytes")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if _ends_torn(self.path):  # a crash mid-append: never glue a new row onto the torn one
                data = "\n" + data
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())

    def replay(self, insert: Callable[[list[LedgerRow]], None], batch_size: int) -> int:
        """Insert every spooled row with `insert` (which raises if the database is down); return rows replayed.

        On an exception the rows stay spooled and the exception propagates.
        """
        with self._lock:
            if self.path.exists():
                if self.replaying.exists():
                    # A previous replay did not finish: fold the new appends into it.
                    with open(self.replaying, "a", encoding="utf-8") as dst, open(self.path, encoding="utf-8") as src:
                        dst.write(src.read())
                    self.path.unlink()
                else:
                    os.replace(self.path, self.replaying)
        if not self.replaying.exists():
            return 0
        n = 0
        batch: list[LedgerRow] = []
        for row in self._read(self.replaying):
            batch.append(row)
            if len(batch) >= batch_size:
                insert(batch)
                n += len(batch)
                batch = []
        if batch:
            insert(batch)
            n += len(batch)
        self.replaying.unlink()
        return n

    def unfinished(self) -> list[LedgerRow]:
        """Spooled rows whose request has no later, more final row in the spool (its last state is `running`)."""
        last: dict[str, LedgerRow] = {}
        with self._lock:
            for path in (self.replaying, self.path):
                if path.exists():
                    for row in self._read(path):
                        old = last.get(row.request_id)
                        if old is None or replaces(row.status, old.status):
                            last[row.request_id] = row
        return [r for r in last.values() if r.status == "running"]

    @staticmethod
    def _read(path: Path) -> Iterator[LedgerRow]:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    yield LedgerRow.from_json_dict(json.loads(line))
                except (ValueError, TypeError, KeyError) as exc:
                    # Only a torn last line after a crash can look like this; keep going.
                    log.warning("ledger_spool_bad_line", path=str(path), line=lineno, error=str(exc))


def _ends_torn(path: Path) -> bool:
    """True when the file's last line has no newline (an append cut short by a crash)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:  # missing or empty
        return False
