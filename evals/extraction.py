"""Extraction accuracy on labelled contracts: generated (evals/contracts_gen.py) and hand-written
(evals/data/contracts_handwritten.txt, `load_handwritten`), with the shipped schema or its plain twin.

Two ways in, scored the same way:
- `run_job`: the job path a back office uses: one extraction job over HTTP (POST /v1/extraction-jobs),
  Celery workers calling the gateway, results read back from GET .../results; items/min from the
  job's creation to its last result;
- `run_direct`: the engine in this process, every item through the same pipeline as a job item
  (jobs/extraction.py: `plan_item` builds the messages and the schema the grammar enforces,
  `finish_item` checks and normalises the answer), without the queue, the worker's retries of an
  invalid answer, or HTTP.
The stored answer is compared field by field with the ground truth. Figures: per-field accuracy
(an invalid output counts as wrong in every field), exact match per item, invalid-output rate and
items per minute of wall time.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from contracts.field_schema import InvalidOutput
from contracts.names import OwnNames
from engine.engine import LLMEngine
from engine.outputs import AdmissionError
from engine.request import EngineRequest, SamplingParams
from evals.contracts_gen import Contract
from jobs.extraction import ItemPlan, finish_item, plan_item

CLASS = "bulk_extraction"
HANDWRITTEN = Path(__file__).resolve().parent / "data" / "contracts_handwritten.txt"
OWN_NAMES = ("Finserve Holdings Ltd.", "Finserve Group Services Limited")  # us, and our service company


def load_handwritten(path: Path = HANDWRITTEN) -> list[Contract]:
    """The hand-written labelled set: "=== ID", a JSON truth line, "---", the text; "{{NAME}}" inserts
    the boilerplate block "=== @NAME" (see the file's header)."""
    blocks: dict[str, str] = {}
    entries: list[tuple[str, str]] = []
    body = path.read_text(encoding="utf-8")
    for chunk in re.split(r"^=== ", body, flags=re.MULTILINE)[1:]:
        head, _, rest = chunk.partition("\n")
        if head.startswith("@"):
            blocks[head[1:].strip()] = rest.strip()
        else:
            entries.append((head.strip(), rest))
    contracts = []
    for cid, rest in entries:
        truth_line, _, text = rest.partition("\n---\n")
        text = re.sub(r"\{\{(\w+)\}\}", lambda m: blocks[m.group(1)], text.strip()) + "\n"
        contracts.append(Contract(cid, text, json.loads(truth_line)))
    return contracts


def plain_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a new user would write: the same fields, types, enums and descriptions, without any
    `x-*` keyword or `pattern`."""
    def strip(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if not k.startswith("x-") and k != "pattern"}
    return {**strip(schema), "properties": {k: strip(f) for k, f in schema["properties"].items()}}


def field_matches(name: str, got: Any, want: Any) -> bool:
    """Equality as a back office would check it: strings ignore case, spacing and a trailing period."""
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(float(got) - float(want)) <= 1e-6 * max(1.0, abs(float(want)))
    if isinstance(want, str) and isinstance(got, str):
        return _canon(got) == _canon(want)
    return False


def _canon(s: str) -> str:
    return " ".join(s.casefold().split()).rstrip(".")


@dataclass
class Outcome:
    id: str
    answer: dict[str, Any] | None  # None: invalid output
    truth: dict[str, Any]
    raw: str
    error: str | None = None
    output_tokens: int = 0

    @property
    def correct(self) -> dict[str, bool]:
        return {k: self.answer is not None and field_matches(k, self.answer.get(k), v) for k, v in self.truth.items()}


@dataclass
class Report:
    items: int
    seconds: float
    outcomes: list[Outcome] = field(default_factory=list)
    output_tokens: int | None = None  # total, when only the total is known (the job path)

    def summary(self) -> dict[str, Any]:
        fields = list(self.outcomes[0].truth) if self.outcomes else []
        per_field = {f: sum(o.correct[f] for o in self.outcomes) / self.items for f in fields}
        invalid = sum(o.answer is None for o in self.outcomes)
        ours = OwnNames(OWN_NAMES)
        return {
            "items": self.items,
            "items_without_record": invalid,
            "own_name_returned": sum(o.answer is not None and any(isinstance(v, str) and ours.is_ours(v)
                                                                  for v in o.answer.values()) for o in self.outcomes),
            "field_accuracy": {f: round(v, 4) for f, v in per_field.items()},
            "overall_field_accuracy": round(sum(per_field.values()) / max(1, len(fields)), 4),
            "exact_match": round(sum(all(o.correct.values()) for o in self.outcomes) / self.items, 4),
            "invalid_rate": round(invalid / self.items, 4),
            "items_per_min": round(self.items / self.seconds * 60.0, 2),
            "output_tokens_per_item": round((self.output_tokens if self.output_tokens is not None
                                             else sum(o.output_tokens for o in self.outcomes)) / self.items, 1),
            "seconds": round(self.seconds, 1),
        }

    def mistakes(self, limit: int = 3) -> dict[str, list[dict[str, Any]]]:
        """Up to `limit` wrong values per field, with the truth: what the model gets wrong."""
        out: dict[str, list[dict[str, Any]]] = {}
        for o in self.outcomes:
            for f, ok in o.correct.items():
                if not ok and len(out.setdefault(f, [])) < limit:
                    got = o.answer.get(f) if o.answer is not None else f"<invalid: {o.error}>"
                    out[f].append({"id": o.id, "got": got, "want": o.truth[f]})
        return out


def run_direct(engine: LLMEngine, contracts: Iterable[Contract], schema_json: str, *, max_tokens: int = 256,
               in_flight: int = 48, progress: Callable[[int], None] | None = None) -> Report:
    """Items kept `in_flight` at a time (under the class's queue limit, as job workers do), then scored."""
    items = list(contracts)
    pending = list(reversed(items))
    t0 = time.perf_counter()
    reqs: dict[str, tuple[Contract, EngineRequest]] = {}
    texts: dict[str, list[str]] = {}
    plans: dict[str, ItemPlan] = {}
    refused: list[Outcome] = []
    done = 0
    while pending or engine.has_unfinished():
        while pending and len(reqs) - done < in_flight:
            c = pending.pop()
            plan = plan_item(schema_json, c.text)
            req = EngineRequest(f"eval-{uuid.uuid4().hex[:12]}", engine.tokenizer.encode_chat(plan.messages),
                                SamplingParams(max_tokens=max_tokens, json_schema=plan.decode_schema), CLASS)
            try:
                engine.add_request(req)
            except AdmissionError as exc:  # refused (e.g. longer than the model's context): an item without a record
                refused.append(Outcome(c.id, None, c.truth, "", f"refused: {exc}"))
                continue
            reqs[req.request_id], texts[req.request_id], plans[req.request_id] = (c, req), [], plan
        for out in engine.step():
            texts[out.request_id].append(out.new_text)
            if out.finished:
                done += 1
                if progress is not None:
                    progress(done)
    report = Report(items=len(items), seconds=time.perf_counter() - t0, outcomes=refused)
    for rid, (c, req) in reqs.items():
        text = "".join(texts[rid])
        try:
            answer: dict[str, Any] | None = finish_item(text, req.status.finish_reason, plans[rid])
            error = None
        except InvalidOutput as exc:
            answer, error = None, str(exc)
        report.outcomes.append(Outcome(c.id, answer, c.truth, text, error, len(req.output_token_ids)))
    return report


class JobFailed(RuntimeError):
    """The job did not complete (cancelled, or not finished within the timeout)."""


def run_job(url: str, api_key: str, contracts: Iterable[Contract], schema: dict[str, Any], *,
            max_tokens: int = 256, timeout_s: float = 3600.0, poll_s: float = 0.5,
            progress: Callable[[int], None] | None = None, own_names: Iterable[str] = ()) -> Report:
    """One extraction job through the gateway at `url` with `api_key`; waits for it, then scores its results."""
    items = list(contracts)
    truth = {c.id: c for c in items}
    body: dict[str, Any] = {"schema": schema, "max_tokens": max_tokens,
                            "items": [{"id": c.id, "text": c.text} for c in items]}
    if own_names:
        body["own_names"] = list(own_names)
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as http:
        resp = http.post("/v1/extraction-jobs", json=body)
        if resp.status_code != 202:
            raise JobFailed(f"the gateway refused the job: HTTP {resp.status_code} {resp.text[:300]}")
        job_id = resp.json()["id"]
        deadline, reported = time.monotonic() + timeout_s, -1
        while True:
            job = http.get(f"/v1/extraction-jobs/{job_id}").raise_for_status().json()
            finished = job["counts"]["done"] + job["counts"]["failed"]
            if progress is not None and finished != reported:
                progress(finished)
                reported = finished
            if job["status"] in ("completed", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise JobFailed(f"job {job_id} unfinished after {timeout_s:.0f} s: {job['counts']}")
            time.sleep(poll_s)
        if job["status"] != "completed":
            raise JobFailed(f"job {job_id} was {job['status']}: {job['counts']}")
        lines = http.get(f"/v1/extraction-jobs/{job_id}/results", params={"format": "ndjson"}).raise_for_status()
        records = [json.loads(line) for line in lines.text.splitlines() if line.strip()]
    seconds = (datetime.fromisoformat(job["last_finished_at"]) - datetime.fromisoformat(job["created_at"])) \
        .total_seconds()
    report = Report(items=len(items), seconds=max(seconds, 1e-6))
    for r in records:
        c = truth[r["id"]]
        answer = r["result"] if r["status"] == "done" else None
        raw = json.dumps(answer, ensure_ascii=False) if answer is not None else ""
        report.outcomes.append(Outcome(c.id, answer, c.truth, raw, r["error"]))
    if len(report.outcomes) != len(items):
        raise JobFailed(f"job {job_id} returned {len(report.outcomes)} results for {len(items)} items")
    report.output_tokens = job.get("output_tokens")
    return report


def summary_json(reports: dict[str, Report], *, mistakes: int = 3, **meta: Any) -> str:
    """One JSON document: `meta`, then per run ("handwritten/shipped", ...) its summary and mistakes."""
    runs = {label: {**r.summary(), "mistakes": r.mistakes(mistakes)} for label, r in reports.items()}
    return json.dumps({**meta, "runs": runs}, indent=2, ensure_ascii=False)
