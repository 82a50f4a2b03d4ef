"""Evidence store and chained events: request_ledger.input_sha256/output_sha256, request_evidence, ledger_events.

Revision ID: 0009_evidence
Revises: 0008_null_reasons
Create Date: 2026-12-01

The new ledger columns are nullable: rows written before this revision (and rows of classes that keep no
evidence) have none, and keep verifying under the chain version they were hashed with.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_evidence"
down_revision = "0008_null_reasons"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.add_column(sa.Column("input_sha256", sa.String(64), nullable=True))
        batch.add_column(sa.Column("output_sha256", sa.String(64), nullable=True))
    op.create_table(
        "request_evidence",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("workload_class", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
    )
    op.create_index("ix_request_evidence_tenant", "request_evidence", ["tenant"])
    op.create_index("ix_request_evidence_expires_at", "request_evidence", ["expires_at"])
    op.create_table(
        "ledger_events",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("tenant", sa.String(64), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
        sa.Column("mac", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("ledger_events")
    op.drop_index("ix_request_evidence_expires_at", "request_evidence")
    op.drop_index("ix_request_evidence_tenant", "request_evidence")
    op.drop_table("request_evidence")
    with op.batch_alter_table("request_ledger") as batch:
        batch.drop_column("output_sha256")
        batch.drop_column("input_sha256")
