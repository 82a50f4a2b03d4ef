"""The ledger row, declared once: each field of `LedgerRow` with its type, the chain version that hashes it,
whether exports carry it, and what it means.

Everything that lists the row's fields derives from this declaration (`LEDGER_FIELDS`): the row's dict for the
database insert and the spool (`LedgerRow.to_dict`), the upsert's columns (upsert.py), the fields each chain
version hashes (chain.py `CHAIN_VERSIONS`), the columns verify and the evidence pack read (`HASHED_COLUMNS`),
the export's columns (`EXPORTED`), the version columns the reports and the pack group by (`VERSION_FIELDS`).
The storage declaration stays core/db/models.py `RequestLedger` (core sits below the ledger), with its Alembic
revisions; tests/ledger/test_fields.py fails until the two agree, name for name and type for type.

`hashed_since` is a chain version number (ledger/chain.py): the field is in the row hash of every row chained
under that version or a later one, and in no earlier one. A chain version's field list is frozen once rows are
chained under it (tests/ledger/test_fields.py pins each), so a hashed field is only ever added with a new chain
version; a field once hashed stays hashed (old rows must keep verifying). Recipe: docs/ARCHITECTURE.md, "Add a
ledger field".
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.evidence import Evidence, SealedEvidence

_META = "ledger"


@dataclass(frozen=True)
class _Declared:
    doc: str
    hashed_since: int | None
    exported: bool
    served_by: bool


def declared(doc: str, *, hashed_since: int | None = None, exported: bool = True,
             served_by: bool = False) -> dict[str, _Declared]:
    """A `LedgerRow` field's metadata (`field(metadata=declared(...))`): see the module docstring."""
    return {_META: _Declared(doc, hashed_since, exported, served_by)}


def _v1(doc: str, **kw: Any) -> dict[str, _Declared]:
    return declared(doc, hashed_since=1, **kw)


@dataclass(kw_only=True)
class LedgerRow:
    """Field for field a `request_ledger` row (core.db.models.RequestLedger), in its column order."""

    request_id: str = field(metadata=_v1("The gateway's request id (X-Finserve-Request-Id): the row's key."))
    tenant: str = field(metadata=_v1("The tenant of the key the request acted as; its chain's partition."))
    workload_class: str = field(metadata=_v1("The class the request was served as."))
    class_rule: str = field(metadata=_v1("Why that class: explicit | route | tenant | heuristic | default."))
    route: str = field(metadata=_v1("The route it came in by: chat, completions, risk, documents, ..."))
    status: str = field(metadata=_v1("finished | failed | aborted | rejected | interrupted; running in flight."))
    finish_reason: str | None = field(default=None, metadata=_v1("stop | length | abort | error."))
    rejection_reason: str | None = field(default=None, metadata=_v1("The error code a rejection was answered."))
    http_status: int = field(metadata=_v1("The status answered; 0 while running and when interrupted."))
    arrival_at: datetime = field(metadata=_v1("The gateway's arrival time, UTC: every latency counts from it."))
    queue_ms: float | None = field(default=None, metadata=_v1("Arrival to first scheduled, ms."))
    prefill_ms: float | None = field(default=None, metadata=_v1("First scheduled to prefill done, ms."))
    ttft_ms: float | None = field(default=None, metadata=_v1("Arrival to first token, ms."))
    tpot_ms: float | None = field(default=None, metadata=_v1("Mean time per output token after the first, ms."))
    e2e_ms: float | None = field(default=None, metadata=_v1("Arrival to last token (or the abort), ms."))
    input_tokens: int = field(default=0, metadata=_v1("Prompt tokens."))
    cached_tokens: int = field(default=0, metadata=_v1("Prompt tokens served from the prefix cache."))
    output_tokens: int = field(default=0, metadata=_v1("Generated tokens."))
    preemptions: int = field(default=0, metadata=_v1("Times the scheduler preempted it."))
    ttft_target_ms: float | None = field(default=None, metadata=_v1("The class's TTFT target then (None: none)."))
    tpot_target_ms: float | None = field(default=None, metadata=_v1("The class's TPOT target then."))
    e2e_target_ms: float | None = field(default=None, metadata=_v1("The class's E2E target then."))
    slo_goal: float | None = field(default=None, metadata=_v1("The class's attainment goal then, e.g. 0.99."))
    slo_percentile: float | None = field(default=None, metadata=_v1("The percentile the targets hold at, e.g. 99."))
    ttft_met: bool | None = field(default=None, metadata=_v1("TTFT target held (None: no target, or not known)."))
    tpot_met: bool | None = field(default=None, metadata=_v1("TPOT target held."))
    e2e_met: bool | None = field(default=None, metadata=_v1("E2E target held."))
    slo_met: bool | None = field(default=None, metadata=_v1("Every target held; None: not counted (ledger/row.py)."))
    timeline: dict[str, Any] | None = field(default=None, metadata=declared(
        "Step timeline, epoch s (ledger/row.py build_timeline); hashed through timeline_sha256, so retention "
        "may drop it; read one request's at /v1/requests/{id}, never exported.", exported=False))
    key_id: str | None = field(default=None, metadata=_v1("The key it acted as (a job item's: its owner's)."))
    replica: str | None = field(default=None, metadata=_v1("The engine replica that served it (FINSERVE_ENGINES)."))
    replica_reason: str | None = field(default=None, metadata=_v1("Why the router chose that replica."))
    model_id: str | None = field(default=None, metadata=_v1("The served model id.", served_by=True))
    weights_sha256: str | None = field(default=None, metadata=_v1("sha256 over the weights files.", served_by=True))
    weight_format: str | None = field(default=None, metadata=_v1("The format the engine resolved.", served_by=True))
    policy_sha256: str | None = field(default=None, metadata=_v1("sha256 of the policy file.", served_by=True))
    finserve_version: str | None = field(default=None, metadata=_v1("The finserve version.", served_by=True))
    chain_seq: int | None = field(default=None, metadata=_v1("Position in its tenant's chain; None while running."))
    prev_hash: str | None = field(default=None, metadata=declared("row_hash of the position before (the link)."))
    row_hash: str | None = field(default=None, metadata=declared("The row's hash under its chain version."))
    timeline_sha256: str | None = field(default=None, metadata=_v1("Digest of the timeline, kept after retention."))
    client_request_id: str | None = field(default=None, metadata=declared(
        "The client's X-Request-Id, when it sent a safe one (added in 0007, after v1: not hashed)."))
    input_sha256: str | None = field(default=None, metadata=declared(
        "Salted sha256 of the request's evidence input (ledger/evidence.py); None: none kept.", hashed_since=3))
    output_sha256: str | None = field(default=None, metadata=declared(
        "Salted sha256 of its evidence output.", hashed_since=3))
    events_seq: int | None = field(default=None, metadata=declared(
        "The event chain's head position when the row was chained: a chain of events deleted later shows as rows "
        "naming events that are gone (ledger/anchors.py).", hashed_since=4))
    # Not a column: the request's evidence on its way to request_evidence (plain until the writer thread
    # seals it, then encrypted; only the sealed form is ever spooled).
    evidence: Evidence | SealedEvidence | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Column values, as the database insert wants them (a shallow copy: the timeline is shared)."""
        return {name: getattr(self, name) for name in COLUMNS}

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-safe form (for the NDJSON spool): the datetime becomes ISO 8601; sealed evidence rides along."""
        d = self.to_dict()
        d["arrival_at"] = self.arrival_at.isoformat()
        if isinstance(self.evidence, SealedEvidence):
            d["evidence"] = self.evidence.to_json_dict()
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> LedgerRow:
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["arrival_at"] = datetime.fromisoformat(d["arrival_at"])
        if d.get("evidence") is not None:
            d["evidence"] = SealedEvidence.from_json_dict(d["evidence"])
        return cls(**d)


@dataclass(frozen=True)
class LedgerField:
    """One column of the row, as LedgerRow declares it."""

    name: str
    type: type  # the value's type, None aside (a generic's origin: dict for dict[str, Any])
    nullable: bool
    hashed_since: int | None  # the first chain version whose row hash covers it; None: no version does
    exported: bool  # a column of `finserve ledger export` and GET /v1/ledger/export
    served_by: bool  # what served the request (ledger/versions.py stamps it; reports group rows by it)
    doc: str


def _of(hint: Any) -> tuple[type, bool]:
    """(type, nullable) of an annotation such as `float | None` or `dict[str, Any]`."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = [a for a in args if a is not type(None)]
    if len(kinds) != 1:
        raise TypeError(f"a ledger field holds one type (or None), not {hint!r}")
    return typing.get_origin(kinds[0]) or kinds[0], len(kinds) < len(args)


def _fields() -> tuple[LedgerField, ...]:
    hints = typing.get_type_hints(LedgerRow)
    out: list[LedgerField] = []
    for f in dataclasses.fields(LedgerRow):
        meta = f.metadata.get(_META)
        if isinstance(meta, _Declared):
            kind, nullable = _of(hints[f.name])
            out.append(LedgerField(f.name, kind, nullable, meta.hashed_since, meta.exported, meta.served_by, meta.doc))
    return tuple(out)


LEDGER_FIELDS = _fields()
COLUMNS = tuple(f.name for f in LEDGER_FIELDS)  # every column, in the table's order
KEY = "request_id"  # the primary key: one row per request
EXPORTED = tuple(f.name for f in LEDGER_FIELDS if f.exported)
VERSION_FIELDS = tuple(f.name for f in LEDGER_FIELDS if f.served_by)
# Every column some chain version hashes (a field once hashed stays hashed): what verify reads of a row.
HASHED_COLUMNS = tuple(f.name for f in LEDGER_FIELDS if f.hashed_since is not None)


def hashed_fields(version: int) -> tuple[str, ...]:
    """The fields a row chained under chain version `version` hashes, in column order."""
    return tuple(f.name for f in LEDGER_FIELDS if f.hashed_since is not None and f.hashed_since <= version)
