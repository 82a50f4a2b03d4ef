"""Per-field metadata of the policy dataclasses: the one place a policy knob is described.

A policy field is declared once, in policies/model.py, as
    max_running: int = field(metadata=knob("batch slots the class may hold", gt=0))
and the loader derives from it which keys a table accepts, which are required, the type
(from the annotation) and the bounds. Relations between fields (`at_most`), between classes
(`unique`, `pool_share`) and to other tables (`class_ref`) are declared here too, so adding a
knob never means editing the loader (see docs/POLICY.md).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_KEY = "policy_knob"


@dataclass(frozen=True, kw_only=True)
class Knob:
    """What the loader needs to know about one field beyond its Python type."""

    doc: str  # one line: what the value means; shown in error messages
    in_file: bool = True  # False: not a key of the file (the loader supplies it, or the default applies)
    from_key: bool = False  # the entry's name in its enclosing table, e.g. [classes.<name>] (implies not in_file)
    optional: bool = False  # may be left out of the file; the dataclass default then applies
    gt: float | None = None  # bounds, for numbers: value > gt, >= ge, < lt, <= le
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    unit: str = ""  # e.g. "milliseconds": named in type errors
    at_most: str | None = None  # name of a sibling field this value may not exceed
    unique: bool = False  # no two entries of the enclosing table may share the value
    pool_share: bool = False  # a fraction of one shared pool: the values over all entries sum to <= 1
    class_ref: bool = False  # a string (or a table of strings) that must name a defined workload class
    key_pattern: str | None = None  # for tables of entries: the entries' names must match this regex ...
    key_rule: str = ""  # ... which this says in words, for the error message
    nonempty: bool = False  # for tables of entries: at least one entry
    json_object: bool = False  # for strings: empty, or the text of one JSON object (e.g. a JSON Schema)


def knob(doc: str, **spec: Any) -> Mapping[str, Knob]:
    """Metadata for dataclasses.field: field(metadata=knob("why", gt=0))."""
    return {_KEY: Knob(doc=doc, **spec)}


def knob_of(f: dataclasses.Field[Any], owner: type) -> Knob:
    """The Knob of a policy dataclass field; a field without one is a programming error."""
    found = f.metadata.get(_KEY)
    if not isinstance(found, Knob):
        raise TypeError(f"{owner.__name__}.{f.name} has no knob(...) metadata; see docs/POLICY.md")
    return found
