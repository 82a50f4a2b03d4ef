"""Ledger checkpoints carry an HMAC: ledger_chain_checkpoints.mac.

Revision ID: 0006_checkpoint_mac
Revises: 0005_batches
Create Date: 2026-12-01

A prune made with FINSERVE_LEDGER_HMAC_KEY set signs its checkpoint, so a checkpoint cannot be made
up (to hide deleted oldest rows) without the key; older checkpoints keep NULL.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_checkpoint_mac"
down_revision = "0005_batches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_chain_checkpoints") as batch:
        batch.add_column(sa.Column("mac", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_chain_checkpoints") as batch:
        batch.drop_column("mac")
