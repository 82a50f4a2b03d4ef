"""Builds policy dataclasses from parsed TOML, driven by their fields and knob(...) metadata.

Supported field types (from the annotations): bool, int, float, str, a str-valued Enum,
`X | None` (written "none" in the file), a nested dataclass (a TOML table) and
`Mapping[str, X]` (a table of entries, each an X; a dataclass X gets its from_key field
from the entry's name) and `tuple[X, ...]` (an array of scalars X, e.g. a list of country codes). Every error is a PolicyError naming the source, key path and problem.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeGuard, TypeVar

from policies.errors import PolicyError
from policies.schema import Knob, knob_of

T = TypeVar("T")
NO_VALUE = "none"  # an optional value written as "none": TOML has no null, and the choice stays explicit


class Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, problem: str) -> PolicyError:
        return PolicyError(problem, source=self.source, key=key)

    # ---- tables -------------------------------------------------------------------------
    def build(self, cls: type[T], raw: object, key: str, supplied: Mapping[str, Any]) -> T:
        """One dataclass from one table; `supplied` holds the fields that are not in the file."""
        table = self._table(raw, key)
        knobs = _knobs(cls)
        in_file = {n for n, k in knobs.items() if k.in_file and not k.from_key}
        optional = {n for n in in_file if knobs[n].optional}
        self.keys(table, key, required=in_file - optional, optional=optional)
        hints = typing.get_type_hints(cls)
        present = [n for n in knobs if n in in_file and n in table]  # in field order
        values = {n: self.value(hints[n], knobs[n], table[n], _join(key, n)) for n in present}
        self._check_at_most(knobs, values, key)
        values.update(supplied)
        return cls(**values)

    def keys(self, raw: Mapping[str, Any], key: str, *, required: set[str], optional: set[str]) -> None:
        for k in sorted(raw):
            if k not in required and k not in optional:
                allowed = ", ".join(sorted(required | optional))
                raise self.error(_join(key, k), f"unknown key (allowed here: {allowed})")
        for k in sorted(required):
            if k not in raw:
                raise self.error(_join(key, k), "missing required key")

    def _entries(self, hint: Any, knob: Knob, raw: object, key: str) -> dict[str, Any]:
        table = self._table(raw, key)
        if knob.nonempty and not table:
            raise self.error(key, f"at least one entry is required ({knob.doc})")
        _, item_type = typing.get_args(hint)
        out: dict[str, Any] = {}
        for name, item in table.items():
            item_key = _join(key, name)
            if knob.key_pattern and not re.match(knob.key_pattern, name):
                raise self.error(item_key, knob.key_rule or f"names must match {knob.key_pattern}")
            if _is_dataclass_type(item_type):
                name_field = {n: name for n, k in _knobs(item_type).items() if k.from_key}
                out[name] = self.build(item_type, item, item_key, name_field)
            else:
                out[name] = self.value(item_type, knob, item, item_key)
        if _is_dataclass_type(item_type):
            self._check_across_entries(item_type, out, key)
        return out

    # ---- one value ----------------------------------------------------------------------
    def value(self, hint: Any, knob: Knob, raw: object, key: str) -> Any:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(inner) != 1:
                raise TypeError(f"{key}: only `X | None` unions are supported in a policy")
            return None if raw == NO_VALUE else self._scalar(inner[0], knob, raw, key, nullable=True)
        if _is_dataclass_type(hint):
            return self.build(hint, raw, key, {})
        if origin is Mapping or origin is dict:
            return self._entries(hint, knob, raw, key)
        if origin is tuple:
            return self._array(hint, knob, raw, key)
        return self._scalar(hint, knob, raw, key, nullable=False)

    def _array(self, hint: Any, knob: Knob, raw: object, key: str) -> tuple[Any, ...]:
        args = typing.get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{key}: only `tuple[X, ...]` arrays are supported in a policy")
        items: list[Any] = self._typed(raw, key, (list,), "an array")
        return tuple(self._scalar(args[0], knob, item, f"{key}[{i}]", nullable=False) for i, item in enumerate(items))

    def _scalar(self, hint: Any, knob: Knob, raw: object, key: str, *, nullable: bool) -> Any:
        none = f' or "{NO_VALUE}"' if nullable else ""
        if hint is bool:
            return self._typed(raw, key, (bool,), f"true or false{none}")
        if hint is str:
            text: str = self._typed(raw, key, (str,), f"a string{none}")
            if knob.json_object and text:
                self._check_json_object(text, knob, key)
            return text
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self._enum(hint, raw, key)
        if hint is int:
            value: int | float = self._typed(raw, key, (int,), f"an integer{_unit(knob)}{none}")
        elif hint is float:
            value = float(self._typed(raw, key, (int, float), f"a number{_unit(knob)}{none}"))
            if not math.isfinite(value):  # TOML allows nan and inf; no policy value means either
                raise self.error(key, f"must be a finite number, got {value}")
        else:
            raise TypeError(f"{key}: a policy field cannot have type {hint!r}")
        self._check_bounds(knob, value, key, nullable)
        return value

    def _check_json_object(self, text: str, knob: Knob, key: str) -> None:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.error(key, f"must be the text of a JSON object ({knob.doc}): {exc}") from None
        if not isinstance(doc, dict):
            raise self.error(key, f"must be the text of a JSON object ({knob.doc}), not {_type_name(doc)}")

    def _typed(self, raw: object, key: str, types_: tuple[type, ...], what: str) -> Any:
        # bool is an int subclass in Python; `priority = true` is a mistake, not 1.
        if isinstance(raw, bool) and bool not in types_ or not isinstance(raw, types_):
            raise self.error(key, f"must be {what}, not {_type_name(raw)} {raw!r}")
        return raw

    def _table(self, raw: object, key: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.error(key, f"must be a table, not {_type_name(raw)} {raw!r}")
        return raw

    def _enum(self, hint: type[enum.Enum], raw: object, key: str) -> enum.Enum:
        allowed = [m.value for m in hint]
        if raw not in allowed:
            raise self.error(key, f"must be one of {', '.join(repr(a) for a in allowed)}, not {raw!r}")
        return hint(raw)

    # ---- relations ----------------------------------------------------------------------
    def _check_bounds(self, knob: Knob, value: float, key: str, nullable: bool) -> None:
        lo_ok = (knob.gt is None or value > knob.gt) and (knob.ge is None or value >= knob.ge)
        hi_ok = (knob.lt is None or value < knob.lt) and (knob.le is None or value <= knob.le)
        if lo_ok and hi_ok:
            return
        hint = f'; write "{NO_VALUE}" to leave it unset' if nullable else ""
        raise self.error(key, f"must be {_bounds(knob)}, got {value!r} ({knob.doc}{hint})")

    def _check_at_most(self, knobs: Mapping[str, Knob], values: Mapping[str, Any], key: str) -> None:
        for name, k in knobs.items():
            other = k.at_most
            if other is not None and values.get(name) is not None and values.get(other) is not None \
                    and values[name] > values[other]:
                raise self.error(_join(key, name), f"{values[name]} is larger than {other} {values[other]}")

    def _check_across_entries(self, item_type: type, entries: Mapping[str, Any], key: str) -> None:
        for name, k in _knobs(item_type).items():
            if k.unique:
                seen: dict[Any, str] = {}
                for entry, obj in entries.items():
                    v = getattr(obj, name)
                    if v in seen:
                        raise self.error(f"{key}.{entry}.{name}",
                                         f"{v!r} is also the {name} of {seen[v]!r}; each entry's {name} must be unique")
                    seen[v] = entry
            if k.pool_share:
                total = sum(getattr(obj, name) for obj in entries.values())
                if total > 1 + 1e-9:
                    parts = " + ".join(f"{e} {getattr(obj, name)}" for e, obj in entries.items())
                    raise self.error(f"{key}.*.{name}", f"shares sum to {total:g} ({parts}); the sum must be <= 1")

    def check_class_refs(self, obj: object, key: str, *, known: Mapping[str, Any]) -> None:
        """Every class_ref field anywhere under `obj` names a key of `known`."""
        if not dataclasses.is_dataclass(obj):
            return
        for name, k in _knobs(type(obj)).items():
            value, field_key = getattr(obj, name), _join(key, name)
            if k.class_ref:
                refs = value.items() if isinstance(value, Mapping) else [(None, value)]
                for sub, ref in refs:
                    if ref not in known:
                        raise self.error(_join(field_key, sub) if sub else field_key,
                                         f"refers to undefined class {ref!r} (defined: {', '.join(sorted(known))})")
            elif isinstance(value, Mapping):
                for sub, item in value.items():
                    self.check_class_refs(item, _join(field_key, sub), known=known)
            else:
                self.check_class_refs(value, field_key, known=known)


def _is_dataclass_type(hint: object) -> TypeGuard[type[Any]]:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _knobs(cls: type) -> dict[str, Knob]:
    return {f.name: knob_of(f, cls) for f in dataclasses.fields(cls)}


def _bounds(k: Knob) -> str:
    lo, lo_open = (k.gt, True) if k.gt is not None else (k.ge, False)
    hi, hi_open = (k.lt, True) if k.lt is not None else (k.le, False)
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    return f"{'<' if hi_open else '<='} {hi:g}"


def _unit(k: Knob) -> str:
    return f" of {k.unit}" if k.unit else ""


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _type_name(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table",
            list: "array"}.get(type(value), type(value).__name__)
