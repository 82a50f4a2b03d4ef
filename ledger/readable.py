"""Values a ledger table holds that its column's type cannot read back.

SQLite stores any value in any column: a text where a number belongs, a float as a chain position, a
malformed time or JSON document. Reading such a row raises in the driver (a time or JSON that does not
parse) or later in the chain's arithmetic. Nothing finserve writes looks like that, so such a row was edited
with SQL, and verify must name it rather than stop: every read verify makes of a ledger table keeps to the
rows `readable(db, table)` admits, and `unreadable(db, table, ...)` lists the others with the columns at
fault. PostgreSQL enforces column types on write, so there every row is readable and both are no-ops.

Each check is at least as strict as what reads the value: an integer column holds an integer, a float
column a number, a boolean 0 or 1, a string column text, a time SQLAlchemy's own text form
(`YYYY-MM-DD HH:MM:SS[.ffffff]`, a real calendar time), a JSON column an object (or null).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ColumnElement,
    Float,
    Integer,
    String,
    Table,
    Text,
    and_,
    case,
    func,
    select,
    true,
    type_coerce,
)
from sqlalchemy.orm import Session

from core.db.base import UTCDateTime

Db = Any  # a Connection or a Session (ledger/verify.py)

_DATE = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
_MICROS = ".[0-9][0-9][0-9][0-9][0-9][0-9]"


def _sqlite(db: Db) -> bool:
    bind = db.get_bind() if isinstance(db, Session) else db
    return bool(bind.dialect.name == "sqlite")


def _time_text(col: Column[Any]) -> ColumnElement[bool]:
    text = type_coerce(col, Text)
    head = func.substr(text, 1, 19)
    # SQLite's datetime() normalises an impossible time (February 30, 24:00) to another one: a mismatch.
    return and_(text.op("GLOB")(_DATE + "*"), func.length(text).in_((19, 26)),
                (func.length(text) == 19) | func.substr(text, 20).op("GLOB")(_MICROS),
                func.substr(text, 1, 4) != "0000", func.datetime(head, "+0 seconds") == head)


def _fits(col: Column[Any]) -> ColumnElement[bool] | None:
    """The SQLite condition under which `col`'s value reads back as its type; None: any value does."""
    t, kind = col.type, func.typeof(col)
    ok: ColumnElement[bool]
    if isinstance(t, Boolean):
        ok = (kind == "integer") & type_coerce(col, Integer).in_((0, 1))
    elif isinstance(t, Integer):
        ok = kind == "integer"
    elif isinstance(t, Float):
        ok = kind.in_(("integer", "real"))
    elif isinstance(t, UTCDateTime):
        ok = (kind == "text") & _time_text(col)
    elif isinstance(t, JSON):
        text = type_coerce(col, Text)
        ok = (kind == "text") & case((func.json_valid(text) == 1, func.json_type(text).in_(("object", "null"))),
                                     else_=False)
    elif isinstance(t, String):
        ok = kind == "text"
    else:
        return None
    # CASE: a comparison with NULL (a datetime() that does not parse) reads as unfit, never as unknown.
    return case(((kind == "null") | ok, True), else_=False)


def _checked(table: Table) -> list[tuple[str, ColumnElement[bool]]]:
    return [(c.name, f) for c in table.c if (f := _fits(c)) is not None]


def readable(db: Db, table: Table) -> ColumnElement[bool]:
    """A WHERE clause that keeps the rows of `table` whose every value reads back (always true but on SQLite)."""
    if not _sqlite(db):
        return true()
    return and_(*(f for _, f in _checked(table)))


def fits(db: Db, col: Column[Any]) -> ColumnElement[bool]:
    """A WHERE clause that keeps the rows whose `col` reads back (always true but on SQLite)."""
    f = _fits(col) if _sqlite(db) else None
    return true() if f is None else f


def unreadable(db: Db, table: Table, keys: Sequence[str], *where: ColumnElement[bool]) -> list[dict[str, Any]]:
    """The rows of `table` (matching `where`) holding a value their column cannot read: each its `keys` columns
    as stored (integer and string columns are read without conversion) and `columns`, the names at fault."""
    if not _sqlite(db):
        return []
    checked = _checked(table)
    flags = [case((f, 0), else_=1).label(f"bad_{name}") for name, f in checked]
    stmt = select(*(table.c[k] for k in keys), *flags).where(~and_(*(f for _, f in checked)), *where)
    out = []
    for r in db.execute(stmt).mappings():
        row = {k: r[k] for k in keys}
        row["columns"] = [name for name, _ in checked if r[f"bad_{name}"]]
        out.append(row)
    return out


def describe(columns: Sequence[str]) -> str:
    """What a problem's detail says of an unreadable row."""
    return (f"its column(s) {', '.join(columns)} hold a value the column's type cannot hold (text in a number, a "
            "malformed time or JSON): edited with SQL after it was written")
