"""Schemathesis with all its phases (issue 23): examples, coverage and fuzzing for every operation (the tests its
pytest integration builds, driven here directly: its lazy fixture does not run on pytest 9), then stateful
sequences over the links it infers from the schema; against the real app on the tiny random model, in process.
A fixed seed, a bounded number of examples. The bar: no 5xx, and every response as the schema says."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import response_schema_conformance

from core.settings import Settings
from engine.client import LocalEngineClient
from stack.app import create_app
from tests.gateway.conftest import Keys, auth, make_client, policy_with

CLASSES = ("realtime_risk", "document_qa", "bulk_extraction")

CHECKS = [not_a_server_error, response_schema_conformance]
SEED = 23
SETTINGS = hypothesis.settings(max_examples=3, derandomize=True, deadline=None, database=None,
                               suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def short_answers(tiny_model_dir: Path) -> Any:
    """An engine whose classes answer at most 4 tokens: the coverage phase sends many requests without max_tokens,
    and 512 tokens each would take minutes; /openapi.json then says 4 as well."""
    client = make_client(tiny_model_dir, policy_with(**{c: {"max_output_tokens": 4} for c in CLASSES}))
    yield client
    client.shutdown()


@pytest.fixture
def api_schema(tmp_path: Path, db_url: str, short_answers: LocalEngineClient) -> Any:
    engine_client = short_answers
    app = create_app(Settings(home=tmp_path, database_url=db_url, log_json=True, broker_url="redis://127.0.0.1:1/0",
                              max_body_bytes=1 << 20), engine_client=engine_client)
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    loaded.config.seed = SEED
    # Job creation enqueues to Redis, which this test does not run (tests/jobs covers it with a real Redis).
    yield loaded.exclude(method="POST", path="/v1/extraction-jobs")
    asgi.shutdown_lifespans()


@pytest.mark.slow
def test_every_phase_finds_no_5xx_and_no_schema_violation(api_schema: Any, keys: Keys) -> None:
    headers = auth(keys.acme_admin)  # admin: every route is reachable, so every response shape is seen
    statuses: dict[int, int] = {}

    def check(case: Any) -> None:
        r = case.call_and_validate(headers={**headers, **(case.headers or {})}, checks=CHECKS)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

    operations = 0
    for result in get_all_tests(schema=api_schema, test_func=check, settings=SETTINGS, given_kwargs={}):
        assert isinstance(result, Ok), result
        operation, test = result.ok()
        test()  # its examples, its coverage cases, then fuzzed ones
        operations += 1
    print("schemathesis responses by status:", dict(sorted(statuses.items())), "operations:", operations)
    assert operations >= 20 and sum(statuses.values()) >= 100
    assert not [code for code in statuses if code >= 500]


@pytest.mark.slow
def test_stateful_sequences_find_no_5xx_and_no_schema_violation(api_schema: Any, keys: Keys) -> None:
    """The stateful phase: chains of calls over the links schemathesis infers (a document created, then read and
    asked; a request answered, then its record read)."""
    machine = api_schema.as_state_machine()
    headers = auth(keys.acme_admin)
    calls: list[int] = []

    class Chains(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": {**headers, **(case.headers or {})}}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            calls.append(response.status_code)
            case.validate_response(response, checks=CHECKS)

    Chains.run(settings=hypothesis.settings(max_examples=5, stateful_step_count=4, derandomize=True, deadline=None,
                                            database=None, suppress_health_check=list(HealthCheck)))
    print("stateful responses:", sorted(calls))
    assert calls and not [c for c in calls if c >= 500]
