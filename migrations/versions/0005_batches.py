"""OpenAI Batch API on the job machinery: extraction_jobs.kind, the files and batches tables.

Revision ID: 0005_batches
Revises: 0004
Create Date: 2026-12-01

Existing jobs are extraction jobs (the server default). A batch is a job of kind "batch" whose
items are its lines; `batches` holds only what OpenAI's batch object adds (docs/JOBS.md).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_batches"  # a distinct id: other branches add their own 0005; the lead re-chains them
down_revision = "0004"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("extraction_jobs") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="extraction"))
    op.create_table(
        "files",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("num_bytes", sa.Integer(), nullable=False),
        sa.Column("num_lines", sa.Integer(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_files_tenant_created", "files", ["tenant", "created_at"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), sa.ForeignKey("extraction_jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("input_file_id", sa.String(40), sa.ForeignKey("files.id"), nullable=False),
        sa.Column("output_file_id", sa.String(40), nullable=False, unique=True),
        sa.Column("error_file_id", sa.String(40), nullable=False, unique=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("batches")
    op.drop_index("ix_files_tenant_created", table_name="files")
    op.drop_table("files")
    with op.batch_alter_table("extraction_jobs") as batch:
        batch.drop_column("kind")
