"""The evidence pack (issue 25): `finserve ledger export --evidence` for a request or a tenant and period,
checked offline by `finserve ledger verify --bundle`; a tampered pack fails and says why. Also `finserve
ledger erase` and `verify --evidence` as an operator runs them. SQLite and PostgreSQL."""
from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine
from typer.testing import CliRunner

from finserve.cli import app
from finserve.console import ExitCode
from ledger.changes import record_start
from ledger.evidence import Keyring
from tests.ledger.factories import T0, make_row
from tests.ledger.test_events import CLOCK, V1
from tests.ledger.test_evidence import evidence, write

ENTRY = Keyring.generate_entry("k1")
HMAC = "a ledger hmac key for the tests"
SEED = Ed25519PrivateKey.generate()
SEED_B64 = base64.b64encode(SEED.private_bytes_raw()).decode()
PUB_B64 = base64.b64encode(SEED.public_key().public_bytes_raw()).decode()


@pytest.fixture
def packed(db_engine: Engine, tmp_path) -> Engine:
    """acme: r0..r4 (r2 without evidence), globex: g0; a start event."""
    ring = Keyring.parse(ENTRY)
    rows = [make_row(f"r{i}", at_s=60 * i, evidence=None if i == 2 else evidence(i)) for i in range(5)]
    write(db_engine, tmp_path, [*rows, make_row("g0", tenant="globex", evidence=evidence(9))], keyring=ring)
    record_start(db_engine, V1, CLOCK, gateway="gw", hmac_key=HMAC.encode())  # as a gateway with the key
    return db_engine


@pytest.fixture
def cli(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FINSERVE_EVIDENCE_KEY", ENTRY)
    monkeypatch.setenv("FINSERVE_LEDGER_HMAC_KEY", HMAC)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_request_pack_verifies_offline_and_holds_its_evidence(packed, cli, tmp_path):
    out = tmp_path / "r3.ndjson"
    res = cli("ledger", "export", "--request-id", "r3", "--evidence", "--out", str(out))
    assert res.exit_code == 0, res.output
    items = lines(out)
    types = [i["type"] for i in items]
    assert types[0] == "header" and types[-1] == "signature" and {"row", "evidence", "head", "event", "versions"} <= set(types)
    ev = next(i for i in items if i["type"] == "evidence")
    assert ev["request_id"] == "r3" and ev["input"]["prompt"]["messages"][0]["content"].endswith("#3")
    assert next(i for i in items if i["type"] == "versions")["versions"] == [
        {"model_id": "", "weights_sha256": "", "weight_format": "", "policy_sha256": "", "finserve_version": ""}]
    ok = cli("ledger", "verify", "--bundle", str(out))
    assert ok.exit_code == 0 and "bundle verified: yes (1 rows, 1 evidence" in ok.stdout, ok.output


def test_a_tenant_period_pack_with_ed25519_and_a_tampered_one(packed, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("FINSERVE_EVIDENCE_SIGNING_KEY", SEED_B64)
    out = tmp_path / "acme.ndjson"
    window = ["--since", (T0 + timedelta(minutes=1)).isoformat(), "--until", (T0 + timedelta(minutes=4)).isoformat()]
    assert cli("ledger", "export", "--tenant", "acme", *window, "--evidence", "--out", str(out)).exit_code == 0
    items = lines(out)
    assert [i["row"]["request_id"] for i in items if i["type"] == "row"] == ["r1", "r2", "r3"]
    assert items[-1]["alg"] == "ed25519"
    res = cli("ledger", "verify", "--bundle", str(out), "--public-key", PUB_B64, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["verified"] is True, res.output
    # Tampered: the decision text changed. The digest no longer matches; re-digested, the signature fails;
    # and the evidence no longer hashes to what the row chains.
    text = out.read_text().replace('\\"risk_level\\": \\"high\\"', '\\"risk_level\\": \\"low\\"')
    assert text != out.read_text()
    bad = tmp_path / "bad.ndjson"
    bad.write_text(text)
    res = cli("ledger", "verify", "--bundle", str(bad), "--json")
    assert res.exit_code == ExitCode.INTEGRITY
    kinds = [p["kind"] for p in json.loads(res.stdout)["problems"]]
    assert kinds[0] == "tampered" and "evidence_mismatch" in kinds
    other = base64.b64encode(Ed25519PrivateKey.generate().public_key().public_bytes_raw()).decode()
    res = cli("ledger", "verify", "--bundle", str(out), "--public-key", other, "--json")
    assert res.exit_code == ExitCode.INTEGRITY and "wrong_signer" in res.stdout


def test_erase_then_verify_and_pack_show_the_erasure(packed, cli, tmp_path):
    dry = cli("ledger", "erase", "--request-id", "r1", "--dry-run", "--output", "json")  # as verify and prune take it
    assert dry.exit_code == 0 and [e["request_id"] for e in json.loads(dry.stdout)["erased"]] == ["r1"], dry.output
    res = cli("ledger", "erase", "--request-id", "r1", "--reason", "ticket 7")
    assert res.exit_code == 0 and "erased the evidence of 1 requests" in res.stdout, res.output
    ok = cli("ledger", "verify", "--evidence")
    assert ok.exit_code == 0, ok.output
    assert "erasure accepted: r1 (tenant acme): evidence_erased" in ok.stdout and "(decrypted)" in ok.stdout
    out = tmp_path / "r1.ndjson"
    assert cli("ledger", "export", "--request-id", "r1", "--evidence", "--out", str(out)).exit_code == 0
    assert [i["reason"] for i in lines(out) if i["type"] == "erasure"] == ["ticket 7"]
    assert "1 erased" in cli("ledger", "verify", "--bundle", str(out)).stdout
    assert cli("ledger", "erase", "--request-id", "r1", "--tenant", "acme").exit_code == 1


def test_a_pack_must_be_signed(packed, cli, monkeypatch, tmp_path):
    monkeypatch.delenv("FINSERVE_LEDGER_HMAC_KEY")
    res = cli("ledger", "export", "--request-id", "r0", "--evidence")
    assert res.exit_code == 1 and "must be signed" in res.stderr
    assert cli("ledger", "export", "--request-id", "r0").exit_code == 1  # --request-id needs --evidence
