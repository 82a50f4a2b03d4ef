"""What each workload class sends in `finserve bench serve`.

  realtime_risk    POST /v1/risk/assess                 one risk event and the default question
  document_qa      POST /v1/documents/{id}/questions    a question about one of the registered documents
  bulk_extraction  POST /v1/chat/completions            a contract section to extract fields from,
                                                        class set explicitly (`workload_class`)
Text is synthetic, generated from seeded generators (no data files, no real customer data);
each request's payload depends only on the seed and its index, so runs are repeatable.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench.loadgen import Arrival, RequestSpec

_ENTITIES = ("ACME Holdings", "Globex Capital", "Initech Bank", "Umbrella Securities", "Stark Treasury",
             "Wayne Asset Management", "Soylent Credit Union", "Tyrell Leasing")
_EVENTS = ("wire_transfer", "card_payment", "fx_trade", "margin_call", "limit_breach", "bond_purchase")
_CURRENCIES = ("USD", "EUR", "GBP", "CHF", "JPY")
_COUNTRIES = ("US", "DE", "GB", "CH", "SG", "KY", "PA", "AE")
_TOPICS = ("capital requirements", "liquidity coverage", "large exposures", "market risk", "operational risk",
           "counterparty credit risk", "leverage ratio", "disclosure", "governance", "stress testing")
_VERBS = ("shall maintain", "shall report", "may apply", "shall not exceed", "shall calculate", "shall notify")
_OBJECTS = ("a ratio of at least eight per cent", "the competent authority within five working days",
            "the standardised approach", "twenty-five per cent of eligible capital",
            "the net stable funding requirement", "an independent risk management function",
            "daily values of the exposure", "the outcomes of the internal assessment")
_QUESTIONS = ("What is the minimum ratio required?", "Who must be notified, and how quickly?",
              "Which approach applies to market risk?", "What limit applies to large exposures?",
              "Summarise the reporting obligations.", "What does the document say about stress testing?",
              "Are there exemptions for small institutions?", "Which section covers governance?")
_CLAUSES = ("The Borrower shall repay the Loan in full on the Termination Date.",
            "Interest accrues daily at the Reference Rate plus the Margin.",
            "This Agreement is governed by the laws of England and Wales.",
            "Either party may terminate this Agreement on ninety days' written notice.",
            "The Guarantor irrevocably guarantees the punctual performance of the Borrower's obligations.",
            "Any amount not paid when due bears default interest at two per cent above the agreed rate.",
            "The Lender may assign its rights under this Agreement to an affiliate.",
            "Financial covenants are tested quarterly on the consolidated accounts.")
EXTRACTION_PROMPT = ("Extract from the contract below a JSON object with the keys parties, governing_law, "
                     "interest_rate, termination_notice_days and guarantor. Use null for missing values.")


@dataclass(frozen=True)
class WorkloadShape:
    """Sizes of what is sent; prompt lengths are in words (a word is ~1.3 tokens)."""

    risk_max_tokens: int = 16  # a verdict and a short reason
    question_max_tokens: int = 64
    bulk_max_tokens: int = 128  # sent with ignore_eos: every bulk item produces exactly this many tokens
    document_words: int = 1200  # each registered document (~1,600 tokens)
    contract_words: int = 300  # each bulk item's contract section (~400 tokens)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def document_text(seed: int, index: int, words: int) -> tuple[str, str]:
    """(title, text) of a synthetic regulation with numbered sections, about `words` words long."""
    rng = random.Random(f"{seed}/document/{index}")
    lines: list[str] = []
    count = 0
    section = 0
    while count < words:
        section += 1
        topic = rng.choice(_TOPICS)
        lines.append(f"Section {section}. {topic.capitalize()}.")
        for _ in range(rng.randint(2, 5)):
            sentence = f"An institution {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} in respect of {topic}."
            lines.append(sentence)
            count += len(sentence.split())
    return f"Synthetic Regulation {index + 1}", "\n".join(lines)


def _contract(rng: random.Random, words: int) -> str:
    a, b = rng.sample(_ENTITIES, 2)
    parts = [f"Facility agreement between {a} (the Borrower) and {b} (the Lender)."]
    count = len(parts[0].split())
    while count < words:
        clause = rng.choice(_CLAUSES)
        parts.append(f"{len(parts)}. {clause}")
        count += len(clause.split()) + 1
    return "\n".join(parts)


class Workload:
    """Builds each arrival's request; needs the ids of the registered documents."""

    def __init__(self, shape: WorkloadShape, *, seed: int, document_ids: list[str], risk_streams: bool):
        self.shape, self.seed, self.document_ids, self.risk_streams = shape, seed, document_ids, risk_streams

    def build(self, a: Arrival) -> RequestSpec:
        rng = random.Random(f"{self.seed}/request/{a.index}")
        build: Callable[[random.Random], RequestSpec] = getattr(self, f"_{a.workload_class}")
        return build(rng)

    def _realtime_risk(self, rng: random.Random) -> RequestSpec:
        event: dict[str, Any] = {
            "event_type": rng.choice(_EVENTS), "event_id": f"evt-{rng.getrandbits(40):010x}",
            "entity": rng.choice(_ENTITIES), "amount": round(rng.lognormvariate(11, 2), 2),
            "currency": rng.choice(_CURRENCIES),
            "attributes": {"country": rng.choice(_COUNTRIES), "new_counterparty": rng.random() < 0.2,
                           "transactions_24h": rng.randint(0, 40)},
        }
        body: dict[str, Any] = {"event": event, "max_tokens": self.shape.risk_max_tokens, "temperature": 0.0}
        if self.risk_streams:
            body["stream"] = True
        return RequestSpec("/v1/risk/assess", body, stream=self.risk_streams)

    def _document_qa(self, rng: random.Random) -> RequestSpec:
        if not self.document_ids:
            raise ValueError("document_qa traffic needs at least one registered document")
        doc = rng.choice(self.document_ids)
        body = {"question": rng.choice(_QUESTIONS), "max_tokens": self.shape.question_max_tokens, "stream": True}
        return RequestSpec(f"/v1/documents/{doc}/questions", body, stream=True)

    def _bulk_extraction(self, rng: random.Random) -> RequestSpec:
        body = {
            "messages": [{"role": "system", "content": EXTRACTION_PROMPT},
                         {"role": "user", "content": _contract(rng, self.shape.contract_words)}],
            "max_tokens": self.shape.bulk_max_tokens, "ignore_eos": True, "temperature": 0.0,
            "workload_class": "bulk_extraction", "stream": True, "stream_options": {"include_usage": True},
        }
        return RequestSpec("/v1/chat/completions", body, stream=True)


async def register_documents(client: httpx.AsyncClient, count: int, *, seed: int, words: int) -> list[dict[str, Any]]:
    """POST /v1/documents `count` times; returns the created documents (id, num_tokens, ...)."""
    docs = []
    for i in range(count):
        title, text = document_text(seed, i, words)
        r = await client.post("/v1/documents", json={"title": title, "text": text})
        if r.status_code != 201:
            raise RuntimeError(f"registering a document failed: HTTP {r.status_code} {r.text[:300]}")
        docs.append(r.json())
    return docs


async def risk_route_streams(client: httpx.AsyncClient) -> bool:
    """Whether the server's /v1/risk/assess accepts `stream` (read from its OpenAPI schema)."""
    r = await client.get("/openapi.json")
    if r.status_code != 200:
        return False
    schema = r.json().get("components", {}).get("schemas", {}).get("RiskAssessRequest", {})
    return "stream" in schema.get("properties", {})
