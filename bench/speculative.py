"""`finserve bench speculative`: prompt-lookup speculative decoding on against off, one engine, alternating.

One engine in this process behind its serving loop (LocalEngineClient); the same requests run with speculation
"auto" (each class's policy) and "off" (`LLMEngine.set_speculative`), A B A B for `reps` repetitions after a
warm-up of each (grammars compiled), medians and minimums. Each run is a new tenant's work under its own cache
salt: its prompts share cached blocks with each other (a job's instructions, a document's other questions) and
never with an earlier run's. The extraction and document parts add a third mode, "plain": no drafts and no
jump-forward (`LLMEngine.set_fast_forward`), every output token a model step, the decoding the issue's speed-up is
counted against (forced tokens count as accepted):
- extraction: contracts as a job worker sends them (jobs/extraction.py `plan_item`: prompt and grammar, greedy),
  from examples/contracts.ndjson and from the generated set (evals/contracts_gen.py), at 1 and 2 items in
  flight: items per minute;
- documents: questions with `quotes: true` (gateway/domain/prompts.py: the route's prompt, candidates and grammar;
  examples/document_questions.json), one at a time: output tokens/s;
- streams: 1, 2 and 8 concurrent streams of each class's requests (risk verdicts under the class's response
  schema, quoted document answers, extraction items): output tokens/s.
Each run records the draft tokens verified and accepted; each part says how many greedy outputs were the
same tokens on and off (identical by construction up to batching; docs/DETERMINISM.md).
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from contracts.field_schema import normalize_schema
from core.logging import configure_logging
from engine.client import LocalEngineClient
from engine.engine import LLMEngine
from engine.outputs import AdmissionError
from engine.request import EngineRequest, SamplingParams
from engine.tokenizer import Tokenizer
from evals.common import environment, summary, write_json
from evals.configured import engine_config, threads_of
from evals.contracts_gen import generate as generated_contracts
from evals.quotes import load_sets
from gateway.domain.document_answer import prepare_question
from gateway.domain.prompts import verdict_messages
from gateway.domain.risk_schemas import DEFAULT_QUESTION, RiskEvent
from jobs.extraction import plan_item
from policies import Policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RISK_EVENTS = ROOT / "evals" / "data" / "risk_events.json"
MODES = ("auto", "off")
WITH_PLAIN = (*MODES, "plain")


def set_mode(engine: LLMEngine, mode: str) -> None:
    """auto: drafts by class policy and jump-forward; off: jump-forward alone; plain: neither."""
    engine.set_speculative("off" if mode == "plain" else mode)
    engine.set_fast_forward(mode != "plain")


@dataclass(frozen=True)
class Work:
    """One request a run sends: `key` names it across runs (its outputs are compared on and off)."""

    key: str
    prompt: list[int]
    sampling: SamplingParams
    workload_class: str


@dataclass
class Run:
    seconds: float
    items: int
    output_tokens: int
    model_steps: int
    draft_tokens: int
    accepted_tokens: int
    outputs: dict[str, list[int]] = field(default_factory=dict)

    def figures(self) -> dict[str, float]:
        return {"items_per_minute": self.items * 60.0 / self.seconds,
                "output_tokens_per_s": self.output_tokens / self.seconds}


def extraction_work(tok: Tokenizer, contracts: list[dict[str, str]], max_tokens: int, tag: str) -> list[Work]:
    """Each contract as a worker's first (greedy) attempt sends it."""
    schema_json = normalize_schema(json.loads((EXAMPLES / "contract_schema.json").read_text()), max_fields=64)
    out = []
    for c in contracts:
        plan = plan_item(schema_json, c["text"])
        out.append(Work(f"{tag}:{c['id']}", tok.encode_chat(plan.messages),
                        SamplingParams(max_tokens=max_tokens, json_schema=plan.decode_schema), "bulk_extraction"))
    return out


def example_contracts() -> list[dict[str, str]]:
    return [json.loads(line) for line in (EXAMPLES / "contracts.ndjson").read_text().splitlines() if line.strip()]


def generated(n: int) -> list[dict[str, str]]:
    return [{"id": c.id, "text": c.text} for c in generated_contracts(n, seed=0)]


def document_work(tok: Tokenizer, max_tokens: int) -> list[Work]:
    """Every labelled question with quotes, as the documents route asks it."""
    out = []
    for doc in load_sets():
        for i, q in enumerate(doc.questions):
            prepared = prepare_question(doc.title, doc.text, q.question, quotes=True, tokenizer=tok)
            out.append(Work(f"doc:{doc.name}:{i}", tok.encode_chat(prepared.messages), SamplingParams(
                max_tokens=max_tokens + prepared.quote_tokens, json_schema=prepared.json_schema,
                regex=prepared.regex, stop_repetition=True), "document_qa"))
    return out


def risk_work(tok: Tokenizer, policy: Policy) -> list[Work]:
    """The labelled risk events as verdicts under the class's response schema (greedy, as the route decodes)."""
    cls = policy.get("realtime_risk")
    schema = json.loads(cls.response_schema)
    events = json.loads(RISK_EVENTS.read_text())["events"]
    return [Work(f"risk:{i}", tok.encode_chat(verdict_messages(RiskEvent(**e["event"]), DEFAULT_QUESTION, schema)),
                 SamplingParams(max_tokens=cls.max_output_tokens, json_schema=cls.response_schema), cls.name)
            for i, e in enumerate(events)]


async def _one(client: LocalEngineClient, w: Work, salt: str) -> tuple[list[int], int, int]:
    """(output tokens, draft tokens, accepted tokens) of one request; a full queue is waited out."""
    while True:
        req = EngineRequest(uuid.uuid4().hex, list(w.prompt), w.sampling, w.workload_class, cache_salt=salt)
        try:
            tokens: list[int] = []
            async for out in client.generate(req):
                tokens += out.new_token_ids
                if out.error:
                    raise RuntimeError(f"{w.key}: {out.error}")
            return tokens, req.num_draft_tokens, req.num_accepted_tokens
        except AdmissionError as exc:
            if not exc.retryable:
                raise
            await asyncio.sleep(exc.retry_after_s or 0.2)


def run_once(client: LocalEngineClient, work: list[Work], concurrency: int) -> Run:
    """One pass over `work` under its own cache salt, as a new tenant's job: its prompts share cached blocks with
    each other (a job's instructions, a document's other questions), never with an earlier run's."""
    salt = f"bench-{uuid.uuid4().hex}"

    async def main() -> list[tuple[list[int], int, int]]:
        gate = asyncio.Semaphore(concurrency)

        async def gated(w: Work) -> tuple[list[int], int, int]:
            async with gate:
                return await _one(client, w, salt)

        return await asyncio.gather(*(gated(w) for w in work))

    t0, steps = time.perf_counter(), client.engine.steps
    done = asyncio.run(main())
    seconds = time.perf_counter() - t0
    return Run(seconds, len(work), sum(len(t) for t, _, _ in done), client.engine.steps - steps, sum(d for _, d, _ in done),
               sum(a for _, _, a in done), {w.key: t for w, (t, _, _) in zip(work, done, strict=True)})


def compare(engine: LLMEngine, client: LocalEngineClient, work: list[Work], concurrency: int, reps: int,
            figure: str, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """`work` at `concurrency` in each of `modes` (set_mode), alternated after a warm-up of each."""
    runs: dict[str, list[Run]] = {m: [] for m in modes}
    for mode in modes:  # warm-up: grammars compiled, prompts' shared blocks cached for every mode alike
        set_mode(engine, mode)
        run_once(client, work[:max(1, concurrency)], concurrency)
    for _ in range(reps):
        for mode in modes:
            set_mode(engine, mode)
            runs[mode].append(run_once(client, work, concurrency))
    set_mode(engine, "auto")
    med = {m: summary([r.figures()[figure] for r in rs]) for m, rs in runs.items()}
    on, off = runs["auto"][0].outputs, runs["off"][0].outputs
    drafted = sum(r.draft_tokens for r in runs["auto"])
    out = {
        "concurrency": concurrency, "requests": len(work), "figure": figure,
        "on": med["auto"], "off": med["off"], "ratio_of_medians": med["auto"]["median"] / med["off"]["median"],
        "output_tokens": {m: [r.output_tokens for r in rs] for m, rs in runs.items()},
        "model_steps": {m: [r.model_steps for r in rs] for m, rs in runs.items()},
        "draft_tokens": drafted, "accepted_tokens": sum(r.accepted_tokens for r in runs["auto"]),
        "acceptance_rate": sum(r.accepted_tokens for r in runs["auto"]) / drafted if drafted else None,
        "identical_outputs": sum(on[k] == off[k] for k in on), "compared_outputs": len(on),
    }
    if "plain" in runs:  # a forced token may be another split of the same text than the model's own choice
        plain = runs["plain"][0].outputs
        out.update(plain=med["plain"], on_over_plain=med["auto"]["median"] / med["plain"]["median"],
                   off_over_plain=med["off"]["median"] / med["plain"]["median"],
                   identical_to_plain=sum(on[k] == plain[k] for k in on))
    return out


def _take(work: list[Work], n: int) -> list[Work]:
    """`n` requests from `work`, cycled (distinct keys per copy)."""
    return [Work(f"{w.key}#{i}", w.prompt, w.sampling, w.workload_class)
            for i, w in enumerate(islice(cycle(work), n))]


def run(json_path: str | None = None, *, model: str | None = None, threads: int | None = None, reps: int = 3,
        generated_items: int = 24, per_stream: int = 4, max_tokens: int = 160,
        parts: tuple[str, ...] = ("extraction", "documents", "streams"),
        limit: Callable[[list[Work]], list[Work]] = lambda w: w) -> dict[str, Any]:
    """Speculation on vs off per part (module docstring); prints and returns the JSON. `limit` trims each
    request list (a quick functional check runs a few of each)."""
    configure_logging(json=True, level="warning")
    kw: dict[str, object] = {"threads": threads} if threads else {}
    config = engine_config(model, **kw)
    client = LocalEngineClient.launch(lambda: LLMEngine(config))
    engine, tok = client.engine, client.engine.tokenizer
    data: dict[str, Any] = {
        "benchmark": "speculative",
        "environment": environment(threads_of(config), config.resolved_dtype, config.model),
        "workload": {"reps": reps, "generated_items": generated_items, "per_stream": per_stream,
                     "max_tokens": max_tokens, "policy": {n: vars(c.speculative) for n, c in config.policy.classes.items()}},
    }
    try:
        extraction = {"examples": limit(extraction_work(tok, example_contracts(), max_tokens, "example")),
                      "generated": limit(extraction_work(tok, generated(generated_items), max_tokens, "generated"))}
        documents = limit(document_work(tok, max_tokens))
        if "extraction" in parts:
            data["extraction"] = {f"{name}@{n}": compare(engine, client, work, n, reps, "items_per_minute", WITH_PLAIN)
                                  for name, work in extraction.items() for n in (1, 2)}
        if "documents" in parts:
            data["documents"] = compare(engine, client, documents, 1, reps, "output_tokens_per_s", WITH_PLAIN)
        if "streams" in parts:
            by_class = {"realtime_risk": limit(risk_work(tok, config.policy)), "document_qa": documents,
                        "bulk_extraction": extraction["examples"] + extraction["generated"]}
            data["streams"] = {f"{cls}@{n}": compare(engine, client, _take(work, n * per_stream), n, reps,
                                                     "output_tokens_per_s")
                               for cls, work in by_class.items() for n in (1, 2, 8)}
    finally:
        client.shutdown()
    write_json(json_path, data)
    return data
