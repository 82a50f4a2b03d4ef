"""Ledger attribution, versions and tamper evidence: request_ledger columns and the chain tables.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Every new column is nullable: rows written before this revision keep NULL (no key id, no
versions, not chained); `finserve ledger verify` counts them as unchained, never as tampered.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NEW_COLUMNS = (
    ("key_id", sa.String(32)), ("replica", sa.String(255)), ("replica_reason", sa.String(64)),
    ("model_id", sa.String(255)), ("weights_sha256", sa.String(64)), ("weight_format", sa.String(16)),
    ("policy_sha256", sa.String(64)), ("finserve_version", sa.String(32)),
    ("chain_seq", sa.Integer()), ("prev_hash", sa.String(64)), ("row_hash", sa.String(64)),
    ("timeline_sha256", sa.String(64)),
)


def upgrade() -> None:
    # batch mode: SQLite cannot add a constraint with ALTER; elsewhere it is a plain ALTER.
    with op.batch_alter_table("request_ledger") as batch:
        for name, type_ in _NEW_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
        batch.create_unique_constraint("uq_request_ledger_tenant_chain_seq", ["tenant", "chain_seq"])
    op.create_table(
        "ledger_chain_heads",
        sa.Column("partition", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
        sa.Column("head_request_id", sa.String(64), nullable=True),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "ledger_chain_checkpoints",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
        sa.Column("rows_pruned", sa.Integer(), nullable=False),
        sa.Column("older_than", _TS, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_ledger_chain_checkpoints_partition", "ledger_chain_checkpoints", ["partition"])
    op.create_table(
        "ledger_chain_superseded",
        sa.Column("partition", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
        sa.Column("old_status", sa.String(16), nullable=False),
        sa.Column("superseded_at", _TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ledger_chain_superseded")
    op.drop_index("ix_ledger_chain_checkpoints_partition", "ledger_chain_checkpoints")
    op.drop_table("ledger_chain_checkpoints")
    op.drop_table("ledger_chain_heads")
    with op.batch_alter_table("request_ledger") as batch:
        batch.drop_constraint("uq_request_ledger_tenant_chain_seq", type_="unique")
        for name, _ in reversed(_NEW_COLUMNS):
            batch.drop_column(name)
