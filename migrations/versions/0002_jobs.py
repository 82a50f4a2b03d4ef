"""Bulk extraction jobs: extraction_jobs, extraction_items.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "extraction_jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("schema_json", sa.Text(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("num_items", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("enqueued_at", _TS, nullable=True),
        sa.Column("cancelled_at", _TS, nullable=True),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_extraction_jobs_tenant_idem"),
    )
    op.create_index("ix_extraction_jobs_tenant_created", "extraction_jobs", ["tenant", "created_at"])
    op.create_table(
        "extraction_items",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(40), sa.ForeignKey("extraction_jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("invalid_outputs", sa.Integer(), nullable=False),
        sa.Column("lease_until", _TS, nullable=True),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.UniqueConstraint("job_id", "external_id", name="uq_extraction_items_job_external"),
    )
    op.create_index("ix_extraction_items_job_status", "extraction_items", ["job_id", "status"])
    op.create_index("ix_extraction_items_status_lease", "extraction_items", ["status", "lease_until"])


def downgrade() -> None:
    op.drop_table("extraction_items")
    op.drop_table("extraction_jobs")
