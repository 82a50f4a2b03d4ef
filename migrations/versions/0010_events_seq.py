"""The event chain's head on each chained ledger row: request_ledger.events_seq.

Revision ID: 0010_events_seq
Revises: 0009_evidence
Create Date: 2026-12-08

Nullable: rows chained before this revision keep NULL and keep verifying under the chain version they were
hashed with (v1-v3 do not hash the column); rows chained from now on are hashed under v4, which does
(ledger/chain.py), so a deleted event chain contradicts them (ledger/anchors.py).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_events_seq"
down_revision = "0009_evidence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.add_column(sa.Column("events_seq", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.drop_column("events_seq")
