"""The client's own X-Request-Id on each ledger row, searchable per tenant.

Revision ID: 0007_client_request_id
Revises: 0006_checkpoint_mac
Create Date: 2026-12-01

Nullable: rows written before it keep NULL. The column is not part of the hash chain
(chain version 1's fields are frozen: ledger/fields.py, ledger/chain.py CHAIN_VERSIONS), so
chains written before and after this revision verify unchanged.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_client_request_id"
down_revision = "0006_checkpoint_mac"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.add_column(sa.Column("client_request_id", sa.String(128), nullable=True))
    op.create_index("ix_request_ledger_tenant_client_request_id", "request_ledger", ["tenant", "client_request_id"])


def downgrade() -> None:
    op.drop_index("ix_request_ledger_tenant_client_request_id", table_name="request_ledger")
    with op.batch_alter_table("request_ledger") as batch:
        batch.drop_column("client_request_id")
