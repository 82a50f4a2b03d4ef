"""Per-field reasons for the null values of an extraction result: extraction_items.null_reasons.

Revision ID: 0008_null_reasons
Revises: 0007_client_request_id
Create Date: 2026-12-01

A done item whose schema allows null may leave a field null when the contract does not state it;
the reason ("not_found", "ambiguous") is stored beside the result (the result itself stays exactly
the schema's object). Nullable: items stored before this revision have none.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_null_reasons"
down_revision = "0007_client_request_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("extraction_items") as batch:
        batch.add_column(sa.Column("null_reasons", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("extraction_items") as batch:
        batch.drop_column("null_reasons")
