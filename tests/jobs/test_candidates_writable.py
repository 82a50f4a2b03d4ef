"""Extraction candidates the model cannot write are not offered.

A candidate is an enum value of the item's decoding schema. A span of the contract holding text the model's
vocabulary cannot write (a character U+40000..U+BFFFF; a special token's text is never a whole span, spans stop
at "<") made the gateway refuse that schema at admission (400 invalid_json_schema: "cannot be written in this
model's tokens"), so the item failed as "refused by the gateway". With the model's tokenizer
(`candidates.model_writable`, what a worker builds from FINSERVE_MODEL) such spans are filtered out and the item
decodes to its end.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from contracts.candidates import model_writable, writable_only
from contracts.field_schema import InvalidOutput, normalize_schema
from engine.request import EngineRequest, SamplingParams
from engine.structured import check_constraint, writable
from engine.tokenizer import Tokenizer
from jobs.extraction import finish_item, plan_item
from tests.jobs.stack import Stack, wait_until

SCHEMA = json.loads((Path(__file__).parents[2] / "examples" / "contract_schema.json").read_text())
PLANE_4 = "\U00047000"  # UTF-8 F1 87 80 80: no SmolLM2 token holds byte F1
PLANE_10 = "\U000a1234"  # lead byte F2, which no token holds either
# No party but ours: the counterparty falls back to any span of the contract, some holding unwritable text.
TEXT = ('SUPPLY AGREEMENT\n\nThis Supply Agreement is made on February 12, 2025 by Finserve Holdings Ltd. '
        f'(the "Buyer") with its supply desk {PLANE_4} North.\nThe desk code {PLANE_10} is printed on each '
        'order.\n1. Price. The total purchase price is EUR 2.5 million.\n2. Term. Two (2) years; it renews '
        'automatically.\n')


@lru_cache(maxsize=2)
def _tokenizer(folder: Path) -> Tokenizer:
    return Tokenizer.from_folder(folder)


def _offered(plan_schema: str) -> list[str]:
    return list(json.loads(plan_schema)["properties"]["counterparty"]["enum"])


def test_without_the_filter_the_items_schema_is_refused_at_admission(tiny_model_dir: Path) -> None:
    """The reproduction: the fallback offers the unwritable spans, and the gateway's check refuses the schema."""
    can_write = model_writable(tiny_model_dir)
    assert can_write is not None
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), TEXT)
    offered = _offered(plan.decode_schema)
    assert any(PLANE_4 in s for s in offered) and any(PLANE_10 in s for s in offered)
    assert not all(can_write(s) for s in offered)
    with pytest.raises(ValueError, match="cannot be written in this model's tokens"):
        check_constraint(_tokenizer(tiny_model_dir), SamplingParams(json_schema=plan.decode_schema))


def test_spans_the_model_cannot_write_are_not_offered(tiny_model_dir: Path) -> None:
    can_write = model_writable(tiny_model_dir)
    assert can_write is not None
    schema_json = normalize_schema(SCHEMA, max_fields=16)
    unfiltered, plan = plan_item(schema_json, TEXT), plan_item(schema_json, TEXT, can_write)
    offered = _offered(plan.decode_schema)
    assert offered == [s for s in _offered(unfiltered.decode_schema) if can_write(s)]  # the rest, in order
    assert offered and not any(PLANE_4 in s or PLANE_10 in s for s in offered)
    assert "its supply desk" in offered  # the writable part of that sentence stays a candidate
    check_constraint(_tokenizer(tiny_model_dir), SamplingParams(json_schema=plan.decode_schema))  # admitted
    assert plan.unanswerable is None
    answer = {k: f["enum"][0] for k, f in json.loads(plan.decode_schema)["properties"].items()}
    record = finish_item(json.dumps(answer, ensure_ascii=False), "stop", plan)
    assert record["counterparty"] == offered[0] and record["notional"] == 2_500_000


def test_writable_only_keeps_the_order_and_without_a_tokenizer_everything(tiny_model_dir: Path) -> None:
    tok = _tokenizer(tiny_model_dir)
    options = ["b", f"x{PLANE_4}", "a", "<|im_start|>", "é 😀"]
    assert writable_only(options, lambda s: writable(tok, s)) == ["b", "a", "é 😀"]
    assert writable_only(options, None) == options
    assert model_writable(tiny_model_dir / "missing") is None


async def test_the_filtered_item_decodes_to_its_end_on_the_real_engine(jobs_engine, tiny_model_dir: Path) -> None:
    """The item's whole path in the engine: admitted by the gateway's check, decoded under its grammar to the
    end (never a failed request), and its answer is a record or a reason (InvalidOutput), as every item's."""
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), TEXT, model_writable(tiny_model_dir))
    tok = jobs_engine.tokenizer
    p = SamplingParams(json_schema=plan.decode_schema, max_tokens=256, temperature=0.0)
    check_constraint(tok, p)
    req = EngineRequest("writable-item", tok.encode_chat(plan.messages), p, workload_class="bulk_extraction")
    outs = [o async for o in jobs_engine.generate(req)]
    last = outs[-1]
    assert last.finished and last.finish_reason in ("stop", "length"), last.error
    text = "".join(o.new_text for o in outs)
    try:
        record = finish_item(text, last.finish_reason, plan)
    except InvalidOutput as exc:  # a random model may spend its budget: the item records why
        assert last.finish_reason == "length", exc
    else:
        assert record["counterparty"] in _offered(plan.decode_schema)


FIELDS = {k: SCHEMA["properties"][k] for k in ("counterparty", "auto_renew")}
SMALL_SCHEMA = {"type": "object", "properties": FIELDS, "required": list(FIELDS), "additionalProperties": False}


@pytest.mark.slow
def test_an_item_whose_contract_holds_unwritable_spans_ends_with_its_record(stack: Stack, tiny_model_dir: Path) -> None:
    """The real path: a worker process (its tokenizer from FINSERVE_MODEL) sends the filtered schema through the
    gateway to the engine; before, the gateway refused it and the item failed "refused by the gateway"."""
    stack.start_worker("w1", concurrency=1, env={"FINSERVE_MODEL": str(tiny_model_dir)})
    with stack.http() as http:
        resp = http.post("/v1/extraction-jobs", json={"schema": SMALL_SCHEMA, "items": [{"id": "u1", "text": TEXT}],
                                                      "max_tokens": 64})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]

        def finished() -> dict | None:
            job = http.get(f"/v1/extraction-jobs/{job_id}").json()
            return job if job["status"] == "completed" else None

        wait_until(finished, 120, "the job to complete")
        [item] = [json.loads(line) for line in http.get(f"/v1/extraction-jobs/{job_id}/results",
                                                       params={"format": "ndjson"}).text.splitlines()]
    assert item["status"] == "done", (item, stack.worker_logs())
    assert item["result"]["auto_renew"] is True
    can_write = model_writable(tiny_model_dir)
    assert can_write is not None and can_write(item["result"]["counterparty"])
    assert item["result"]["counterparty"] in TEXT
