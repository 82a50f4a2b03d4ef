"""/v1/risk/assess: one risk event plus a question, answered briefly as `realtime_risk`."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.web.text import EdgeModel
from gateway.schemas.common import MaxTokens, Temperature, Timings, Usage
from policies.risk_model import CURRENCY_PATTERN

Scalar = str | int | float | bool | None
MAX_LIST_ITEMS = 64  # items of one list attribute: a feed's recent amounts or references, not a history dump
MAX_ATTRIBUTE_DEPTH = 4  # levels of nested objects flattened into dotted names ("kyc": {"risk": {...}}: 2)


def flattened(attributes: Any, prefix: str = "", depth: int = 0) -> Any:
    """A feed's nested objects as dotted names ({"kyc": {"risk_rating": "high"}} -> {"kyc.risk_rating": "high"}),
    as the readers take them (policies/risk_text.py reads a dotted path's words), and a list of objects as one list
    per field (_columns); anything else as it came. A name written both ways, or objects nested deeper than
    MAX_ATTRIBUTE_DEPTH, is refused: never one silently dropped."""
    if not isinstance(attributes, dict):
        return attributes
    out: dict[Any, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and isinstance(key, str):
            if depth + 1 > MAX_ATTRIBUTE_DEPTH:
                raise ValueError(f"attribute {name!r}: objects nested more than {MAX_ATTRIBUTE_DEPTH} levels deep")
            inner = flattened(value, name, depth + 1)
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value) \
                and isinstance(key, str):
            inner = _columns(value, name, depth + 1)
        else:
            inner = {name: value}
        for k, v in inner.items():
            if k in out:
                raise ValueError(f"attribute {k!r} is given twice (as a dotted name and nested)")
            out[k] = v
    return out


def _columns(items: list[dict[Any, Any]], name: str, depth: int) -> dict[str, list[Any]]:
    """A list of objects ({"deposits": [{"branch": "A", "amount": 9500}, {"branch": "B", "amount": 9700}]}) as one
    list per field, in the items' order ({"deposits.branch": ["A", "B"], "deposits.amount": [9500, 9700]}): how
    the readers take a list of values (the largest of numbers, the words of texts); an item without a field adds
    nothing to its list. A list inside an item is refused, as a list inside a list is."""
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise ValueError(f"attribute {name!r}: objects nested more than {MAX_ATTRIBUTE_DEPTH} levels deep")
    rows = [flattened(item, name, depth) for item in items]
    fields = list(dict.fromkeys(k for row in rows for k in row))
    for field_name in fields:
        if any(isinstance(row.get(field_name), list) for row in rows):
            raise ValueError(f"attribute {field_name!r}: a list inside a list of objects")
    return {field_name: [row[field_name] for row in rows if field_name in row] for field_name in fields}


DEFAULT_QUESTION = "How risky is this event? Answer with a risk level (low, medium or high) and one short reason."


class RiskEvent(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "stream": 0 is not a bool (as on the OpenAI routes)

    event_type: str = Field(min_length=1, max_length=64, examples=["wire_transfer"])
    event_id: str | None = Field(None, max_length=128)
    timestamp: datetime | None = Field(None, strict=False)  # JSON has no datetime: ISO 8601 text is parsed
    entity: str | None = Field(None, max_length=256, description="Account, counterparty or instrument.")
    amount: float | None = None
    currency: str | None = Field(None, pattern=CURRENCY_PATTERN,
                                 description="ISO 4217 (USD) or a crypto asset's ticker (USDT, BTC).")
    attributes: dict[str, Scalar | Annotated[list[Scalar], Field(max_length=MAX_LIST_ITEMS)]] = Field(
        default_factory=dict, max_length=64,
        description="Further facts about the event: each a value or a list of values (recent amounts, ports of call, "
                    f"payment references; at most {MAX_LIST_ITEMS} items). A nested object is read as dotted names "
                    f"({{\"kyc\": {{\"risk_rating\": \"high\"}}}} as \"kyc.risk_rating\"), at most "
                    f"{MAX_ATTRIBUTE_DEPTH} levels deep; a list of objects as one list per field ({{\"deposits\": "
                    f"[{{\"amount\": 9500}}, {{\"amount\": 9700}}]}} as \"deposits.amount\": [9500, 9700]); a name "
                    f"given both ways is refused (400).")

    @field_validator("attributes", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> Any:
        return flattened(value)


class RiskAssessRequest(EdgeModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "stream": 0 is not a bool (as on the OpenAI routes)

    event: RiskEvent
    question: str = Field(DEFAULT_QUESTION, min_length=1, max_length=2000)
    max_tokens: MaxTokens | None = Field(None, description="Default: the gateway's risk_max_tokens setting.")
    temperature: Temperature = 0.0
    stream: bool = Field(False, description="Server-sent events: delta events, then one done event.")
    format: Literal["json", "text"] = Field(
        "json", description="json: a verdict constrained to the schema (the class's policy schema unless "
                            "response_schema is given); text: a free-text answer.")
    response_schema: dict[str, Any] | None = Field(
        None, description="A JSON Schema for this request's verdict, instead of the class's policy schema "
                          "(format json only: with format text it is refused, 400).")


class RiskAssessment(BaseModel):
    request_id: str
    workload_class: str
    answer: str = Field(description="The answer text as decoded (for a verdict: its JSON text).")
    verdict: dict[str, Any] | None = Field(
        None, description="The decoded verdict, valid against the schema; null for format=text, or when the "
                          "answer was cut at max_tokens (finish_reason 'length').")
    scoring: dict[str, Any] | None = Field(
        None, description="With the class's risk rules: the rules that fired with their points, the mitigations "
                          "that lowered rules (the context that explains them), the word model's largest "
                          "contributions (model_contributions: intercept, the rules' outcome, the top features "
                          "with their signed points; null without a word model), the action head's score and "
                          "contributions (action_score, action_contributions), the block head's (block_score, "
                          "block_contributions), and the model's judgement "
                          "(level probabilities, severity, points added); null otherwise.")
    finish_reason: str
    usage: Usage
    timings: Timings
