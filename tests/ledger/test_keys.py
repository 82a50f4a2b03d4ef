"""API keys: stored hashed, verified, limited to classes, revocable; the dev key survives restarts."""
from __future__ import annotations

import json

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from core.db.jobs_models import ExtractionItem, ExtractionJob
from core.db.models import ApiKey, Tenant
from core.keys import (
    ItemNotRunning,
    ItemOwnerUnavailable,
    create_key,
    ensure_dev_key,
    hash_key,
    revoke_key,
    verify_key,
)
from finserve.commands import db as db_commands
from jobs.owners import item_owner


def test_key_is_stored_only_as_hash_and_verifies(session):
    raw = create_key(session, "acme", rate_limit_rps=5)
    row = session.scalars(select(ApiKey)).one()
    assert raw not in (row.key_hash, row.prefix) and row.key_hash == hash_key(raw)
    assert raw.startswith(row.prefix) and len(row.prefix) < len(raw) // 2
    assert session.get(Tenant, "acme") is not None

    info = verify_key(session, raw)
    assert info is not None and info.tenant == "acme" and info.key_id == row.key_id
    assert info.rate_limit_rps == 5 and not info.is_admin and info.allowed_classes is None
    assert info.allows("realtime_risk") and info.allows("bulk_extraction")


def test_wrong_missing_and_revoked_keys_do_not_verify(session):
    raw = create_key(session, "acme")
    assert verify_key(session, raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert verify_key(session, "") is None and verify_key(session, None) is None
    assert verify_key(session, "Bearer " + raw) is None
    key_id = verify_key(session, raw).key_id
    assert revoke_key(session, key_id) is True
    assert verify_key(session, raw) is None
    assert revoke_key(session, key_id) is False


def test_class_limits_admin_and_default_class(session):
    raw = create_key(session, "risk-desk", classes=["realtime_risk"], default_class="realtime_risk", admin=True)
    info = verify_key(session, raw)
    assert info.allowed_classes == frozenset({"realtime_risk"})
    assert info.allows("realtime_risk") and not info.allows("bulk_extraction")
    assert info.is_admin and info.default_class == "realtime_risk"


def test_two_keys_of_one_tenant_are_distinct(session):
    a, b = create_key(session, "acme"), create_key(session, "acme")
    assert a != b and verify_key(session, a).key_id != verify_key(session, b).key_id
    assert len(session.scalars(select(Tenant)).all()) == 1


def test_default_class_must_be_allowed(session):
    with pytest.raises(ValueError):
        create_key(session, "acme", classes=["document_qa"], default_class="realtime_risk")


def test_dev_key_is_created_once_and_reused(session, tmp_path):
    first = ensure_dev_key(session, tmp_path / "dev_key")
    assert (tmp_path / "dev_key").read_text().strip() == first
    assert (tmp_path / "dev_key").stat().st_mode & 0o077 == 0
    assert verify_key(session, first).is_admin
    assert ensure_dev_key(session, tmp_path / "dev_key") == first
    assert len(session.scalars(select(ApiKey)).all()) == 1


def test_dev_key_is_replaced_when_the_database_lost_it(session, tmp_path):
    (tmp_path / "dev_key").write_text("fsk_not-a-key-in-this-database\n")
    raw = ensure_dev_key(session, tmp_path / "dev_key")
    assert raw != "fsk_not-a-key-in-this-database" and verify_key(session, raw) is not None
    assert (tmp_path / "dev_key").read_text().strip() == raw


def test_worker_keys_and_admin_keys_may_act_for_job_items_plain_keys_may_not(session):
    worker = verify_key(session, create_key(session, "ops", worker=True))
    admin = verify_key(session, create_key(session, "dev", admin=True))
    plain = verify_key(session, create_key(session, "acme"))
    assert worker.is_worker and worker.may_act_for_items and not worker.is_admin
    assert admin.may_act_for_items and not admin.is_worker
    assert not plain.is_worker and not plain.may_act_for_items


def test_a_running_item_acts_as_the_key_that_submitted_its_job(session):
    raw = create_key(session, "acme", classes=["bulk_extraction"], rate_limit_rps=3)
    owner = verify_key(session, raw)
    job = ExtractionJob(id="job_1", tenant="acme", key_id=owner.key_id, workload_class="bulk_extraction",
                        schema_json="{}", max_tokens=8, num_items=3, request_hash="h")
    session.add(job)
    session.flush()
    items = [ExtractionItem(job_id=job.id, seq=i, external_id=f"c{i}", text="t", status=status)
             for i, status in enumerate(("running", "pending", "done"))]
    session.add_all(items)
    session.commit()
    running, pending, done = (i.id for i in items)
    assert item_owner(session, running) == owner  # tenant, classes and rate limit of the submitter
    for not_running in (pending, done, 10_000):
        with pytest.raises(ItemNotRunning):
            item_owner(session, not_running)
    revoke_key(session, owner.key_id)
    with pytest.raises(ItemOwnerUnavailable):
        item_owner(session, running)


def test_keys_create_worker_flag(session, db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    app = typer.Typer()
    db_commands.register(app)
    res = CliRunner().invoke(app, ["keys", "create", "--tenant", "ops", "--worker"])
    assert res.exit_code == 0, res.output
    assert verify_key(session, res.stdout.strip().splitlines()[0]).is_worker
    listing = json.loads(CliRunner().invoke(app, ["keys", "list", "--output", "json"]).stdout)
    assert [k["worker"] for k in listing if k["tenant"] == "ops"] == [True]
