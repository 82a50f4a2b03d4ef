"""Job items act as their owner: api_keys.is_worker, extraction_jobs.key_id and workload_class.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot ALTER a table beyond adding a column; it is a plain ALTER elsewhere.
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("is_worker", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("extraction_jobs") as batch:
        batch.add_column(sa.Column("key_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("workload_class", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("extraction_jobs") as batch:
        batch.drop_column("workload_class")
        batch.drop_column("key_id")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("is_worker")
