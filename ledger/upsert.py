"""The writer's SQL and future helpers: the idempotent upsert of ledger rows, outage classification."""
from __future__ import annotations

from concurrent.futures import Future, InvalidStateError
from typing import Any, cast

from sqlalchemy import ColumnClause, Connection, Table, and_, insert, literal_column, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from core.db.models import RUNNING_STATUS, RequestLedger
from ledger.fields import COLUMNS, KEY
from ledger.row import replaces

# SQL literals, not bound parameters: the upsert runs as executemany, where every bound value is per row.
_RUNNING: ColumnClause[str] = literal_column(f"'{RUNNING_STATUS}'")
_INTERRUPTED: ColumnClause[str] = literal_column("'interrupted'")
_TABLE = cast(Table, RequestLedger.__table__)


def write_values(conn: Connection, values: list[dict[str, Any]]) -> None:
    """Insert new request ids; replace an existing row only as `replaces()` says (the WHERE repeats the rule)."""
    table = _TABLE
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
        new, old = ins.excluded.status, table.c.status
        stmt = ins.on_conflict_do_update(
            index_elements=[KEY],
            set_={name: ins.excluded[name] for name in COLUMNS if name != KEY},
            where=or_(and_(old == _RUNNING, new != _RUNNING),
                      and_(old == _INTERRUPTED, new != _RUNNING, new != _INTERRUPTED)))
        conn.execute(stmt, values)
        return
    # portable fallback: the chain's head lock (or one writer per database) makes check-then-write safe
    have = dict(conn.execute(select(table.c.request_id, table.c.status).where(
        table.c.request_id.in_([v["request_id"] for v in values]))).all())
    fresh = [v for v in values if v["request_id"] not in have]
    if fresh:
        conn.execute(insert(table), fresh)
    for v in values:
        if v["request_id"] in have and replaces(v["status"], have[v["request_id"]]):
            conn.execute(update(table).where(table.c.request_id == v["request_id"]).values(v))


def is_outage(exc: BaseException) -> bool:
    """True for 'the database is not there' (retry later), False for 'this row is bad'."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    if isinstance(exc, SQLAlchemyError):
        return bool(getattr(exc, "connection_invalidated", False))
    return not isinstance(exc, (TypeError, ValueError))


def resolve(done: Future[bool], result: bool = False, *, exc: BaseException | None = None) -> None:
    """Settle a row's future unless its waiter already gave up on it (a client that disconnected
    cancels it): a cancelled future must never raise in the writer thread."""
    if done.done():
        return
    try:
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)
    except InvalidStateError:  # cancelled between the check and the set
        pass
