"""On-disk NDJSON spool for ledger rows the database could not take.

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

from gateway.ledger.row import LedgerRow

log = structlog.get_logger("finserve.ledger")


class Spool:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.replaying = self.path.with_name(self.path.name + ".replaying")
        self._lock = threading.Lock()  # serialises appends from submit() and the writer thread

    def has_data(self) -> bool:
        return self.path.exists() or self.replaying.exists()

    def append(self, rows: Sequence[LedgerRow]) -> None:
        """Append rows durably (fsync): the spool only exists for the case where things already went wrong."""
        if not rows:
            return
        data = "".join(json.dumps(r.to_json_dict(), separators=(",", ":")) + "\n" for r in rows)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
