"""Core tables: tenants, api_keys, documents, request_ledger.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Jobs tables (0002) build on this revision: their `down_revision` is "0001".
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("allowed_classes", sa.JSON(), nullable=True),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("rate_limit_rps", sa.Float(), nullable=False),
        sa.Column("default_class", sa.String(64), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("revoked_at", _TS, nullable=True),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])

    op.create_table(
        "documents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("title", sa.String(512), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_documents_tenant_created", "documents", ["tenant", "created_at"])

    op.create_table(
        "request_ledger",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("workload_class", sa.String(64), nullable=False),
        sa.Column("class_rule", sa.String(16), nullable=False),
        sa.Column("route", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("finish_reason", sa.String(32), nullable=True),
        sa.Column("rejection_reason", sa.String(64), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=False),
        sa.Column("arrival_at", _TS, nullable=False),
        *(sa.Column(f"{m}_ms", sa.Float(), nullable=True) for m in ("queue", "prefill", "ttft", "tpot", "e2e")),
        *(sa.Column(n, sa.Integer(), nullable=False)
          for n in ("input_tokens", "cached_tokens", "output_tokens", "preemptions")),
        *(sa.Column(f"{m}_target_ms", sa.Float(), nullable=True) for m in ("ttft", "tpot", "e2e")),
        sa.Column("slo_goal", sa.Float(), nullable=True),
        sa.Column("slo_percentile", sa.Float(), nullable=True),
        *(sa.Column(f"{m}_met", sa.Boolean(), nullable=True) for m in ("ttft", "tpot", "e2e", "slo")),
        sa.Column("timeline", sa.JSON(), nullable=True),
    )
    op.create_index("ix_request_ledger_arrival_at", "request_ledger", ["arrival_at"])
    op.create_index("ix_request_ledger_class_arrival", "request_ledger", ["workload_class", "arrival_at"])
    op.create_index("ix_request_ledger_tenant_arrival", "request_ledger", ["tenant", "arrival_at"])


def downgrade() -> None:
    op.drop_table("request_ledger")
    op.drop_table("documents")
    op.drop_table("api_keys")
    op.drop_table("tenants")
