"""The ledger row is declared once (ledger/fields.py): the table, the chain versions and every derived list agree
with it, and each chain version hashes exactly the fields it always has."""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import JSON, Table, TypeDecorator
from sqlalchemy.types import TypeEngine

from core.db.models import RequestLedger
from ledger import chain, export
from ledger.events import CHANGE_KINDS
from ledger.fields import (
    COLUMNS,
    EXPORTED,
    HASHED_COLUMNS,
    LEDGER_FIELDS,
    VERSION_FIELDS,
    LedgerField,
    LedgerRow,
    hashed_fields,
)
from ledger.reports.render import CSV_FIELDS
from ledger.reports.timeline import FACTS
from ledger.versions import Versions

TABLE = cast(Table, RequestLedger.__table__)

# Pinned by hand, never derived: rows chained under a version verify only while its fields stay these. A new
# hashed field comes with a new chain version (and a new line here); these lines never change.
V1 = (
    "request_id", "tenant", "workload_class", "class_rule", "route", "status", "finish_reason",
    "rejection_reason", "http_status", "arrival_at", "queue_ms", "prefill_ms", "ttft_ms", "tpot_ms", "e2e_ms",
    "input_tokens", "cached_tokens", "output_tokens", "preemptions", "ttft_target_ms", "tpot_target_ms",
    "e2e_target_ms", "slo_goal", "slo_percentile", "ttft_met", "tpot_met", "e2e_met", "slo_met",
    "key_id", "replica", "replica_reason", "model_id", "weights_sha256", "weight_format", "policy_sha256",
    "finserve_version", "chain_seq", "timeline_sha256",
)
PINNED = {
    1: ("finserve-ledger-chain-v1", V1, False),
    2: ("finserve-ledger-chain-v2", V1, True),
    3: ("finserve-ledger-chain-v3", (*V1, "input_sha256", "output_sha256"), None),
    4: ("finserve-ledger-chain-v4", (*V1, "input_sha256", "output_sha256", "events_seq"), None),
}


@pytest.mark.parametrize("number", sorted(PINNED))
def test_each_chain_version_hashes_the_fields_it_always_has(number):
    v = chain.CHAIN_VERSIONS[number]
    assert (v.tag, v.fields, v.binds) == PINNED[number]


def test_every_declared_chain_version_is_pinned():
    assert set(chain.CHAIN_VERSIONS) == set(PINNED), "pin the new chain version's fields in PINNED"
    assert chain.CURRENT_VERSION.number == max(PINNED)


def test_the_table_stores_every_field_in_the_declared_order():
    columns = [c.name for c in TABLE.columns]
    missing, extra = set(COLUMNS) - set(columns), set(columns) - set(COLUMNS)
    assert not missing, f"declared in ledger/fields.py but no column of core/db/models.py RequestLedger: {missing}"
    assert not extra, f"columns of RequestLedger that ledger/fields.py LedgerRow does not declare: {extra}"
    assert list(COLUMNS) == columns, "declare LedgerRow's fields in RequestLedger's column order"


def _python_type(kind: TypeEngine[Any]) -> type:
    if isinstance(kind, TypeDecorator):  # UTCDateTime: a DateTime underneath
        kind = kind.impl_instance
    return dict if isinstance(kind, JSON) else kind.python_type  # JSON holds any document; the ledger's are objects


@pytest.mark.parametrize("f", LEDGER_FIELDS, ids=lambda f: f.name)
def test_each_field_has_its_columns_type_and_nullability(f: LedgerField):
    column = TABLE.c[f.name]
    assert f.type is _python_type(column.type), f"{f.name}: declared {f.type.__name__}, stored as {column.type}"
    assert f.nullable == column.nullable, f"{f.name}: declared nullable={f.nullable}, the column says {column.nullable}"
    assert f.doc.strip(), f"{f.name}: say what it means"


def test_every_row_field_but_the_evidence_is_declared():
    undeclared = {f.name for f in dataclasses.fields(LedgerRow)} - set(COLUMNS)
    assert undeclared == {"evidence"}, "a LedgerRow field is a column only with field(metadata=declared(...))"
    assert tuple(LedgerRow(request_id="r", tenant="t", workload_class="c", class_rule="route", route="risk",
                           status="finished", http_status=200, arrival_at=datetime.now(UTC)).to_dict()) == COLUMNS


def test_the_derived_lists_are_what_they_were_by_hand():
    assert export.COLUMNS == EXPORTED == tuple(c.name for c in TABLE.columns if c.name != "timeline")
    assert HASHED_COLUMNS == hashed_fields(chain.CURRENT_VERSION.number) == PINNED[max(PINNED)][1]
    assert VERSION_FIELDS == ("model_id", "weights_sha256", "weight_format", "policy_sha256", "finserve_version")
    assert tuple(f.name for f in dataclasses.fields(Versions)) == VERSION_FIELDS
    assert set(CHANGE_KINDS) == set(VERSION_FIELDS), "a served-by field needs its change event kind (ledger/events.py)"
    at = CSV_FIELDS.index("model_id")
    assert CSV_FIELDS[at:at + len(VERSION_FIELDS) + 1] == (*VERSION_FIELDS, "version_share")
    # the timeline page's facts, as they were listed by hand, in that order (fields declared later join them)
    by_hand = ("tenant", "workload_class", "class_rule", "route", "status", "finish_reason", "rejection_reason",
               "http_status", "arrival_at", "queue_ms", "prefill_ms", "ttft_ms", "tpot_ms", "e2e_ms", "input_tokens",
               "cached_tokens", "output_tokens", "preemptions", "slo_met", "key_id", "replica", "replica_reason",
               "model_id", "weights_sha256", "weight_format", "policy_sha256", "finserve_version", "chain_seq",
               "row_hash")
    assert tuple(f for f in FACTS if f in by_hand) == by_hand


def test_a_field_hashed_under_an_undeclared_chain_version_is_refused():
    new = LedgerField("made_up", str, True, max(chain.CHAIN_VERSIONS) + 1, True, False, "a field for this test")
    with pytest.raises(RuntimeError, match=r"made_up.*CHAIN_VERSIONS"):
        chain.check_versions((*LEDGER_FIELDS, new), chain.CHAIN_VERSIONS)
    chain.check_versions(LEDGER_FIELDS, chain.CHAIN_VERSIONS)
