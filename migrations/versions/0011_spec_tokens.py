"""Speculative decoding's evidence on each ledger row: request_ledger.draft_tokens and accepted_tokens.

Revision ID: 0011_spec_tokens
Revises: 0010_events_seq
Create Date: 2026-12-05

Nullable: rows written before this revision keep NULL (not known). Neither column is hashed by any chain version:
they record how the answer was computed (draft tokens verified, accepted), not what it is, so every chain
verifies as before.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_spec_tokens"
down_revision = "0010_events_seq"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.add_column(sa.Column("draft_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("accepted_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_ledger") as batch:
        batch.drop_column("accepted_tokens")
        batch.drop_column("draft_tokens")
