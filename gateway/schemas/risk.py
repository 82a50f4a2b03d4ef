"""/v1/risk/assess: one risk event plus a question, answered briefly as `realtime_risk`."""
from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from core.web.text import EdgeModel
from gateway.schemas.common import MaxTokens, Temperature, Timings, Usage

DEFAULT_QUESTION = "How risky is this event? Answer with a risk level (low, medium or high) and one short reason."


class RiskEvent(EdgeModel):
    model_config = ConfigDict(extra="forbid")

    event_type: str = Field(min_length=1, max_length=64, examples=["wire_transfer"])
    event_id: str | None = Field(None, max_length=128)
    timestamp: datetime | None = None
    entity: str | None = Field(None, max_length=256, description="Account, counterparty or instrument.")
    amount: float | None = None
    currency: str | None = Field(None, pattern=r"^[A-Z]{3}$")
    attributes: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, max_length=64, description="Further flat facts about the event.")


class RiskAssessRequest(EdgeModel):
    model_config = ConfigDict(extra="forbid")

    event: RiskEvent
    question: str = Field(DEFAULT_QUESTION, min_length=1, max_length=2000)
    max_tokens: MaxTokens | None = Field(None, description="Default: the gateway's risk_max_tokens setting.")
    temperature: Temperature = 0.0
    stream: bool = Field(False, description="Server-sent events: delta events, then one done event.")


class RiskAssessment(BaseModel):
    request_id: str
    workload_class: str
    answer: str
    finish_reason: str
    usage: Usage
    timings: Timings
