"""The loader's keys, types and bounds come from the dataclass fields and their knob metadata alone."""
from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from policies import (
    ClassificationRules,
    ClassPolicy,
    Policy,
    PolicyError,
    RoutingPolicy,
    SLOTargets,
    load_policy,
    policy_from_dict,
)
from policies.model import Speculation
from policies.risk_model import RiskCheck, RiskFact, RiskMitigation, RiskRule, RiskRules
from policies.schema import knob, knob_of

from .conftest import default_policy_dict

POLICY_TYPES = (Policy, ClassPolicy, SLOTargets, ClassificationRules)


class Spill(enum.Enum):
    DISK = "disk"
    DROP = "drop"


# A knob added the way docs/POLICY.md says: one field with its metadata, nothing else.
@dataclass(frozen=True, kw_only=True)
class BurstClassPolicy(ClassPolicy):
    max_burst: int = field(metadata=knob("requests admitted at once above max_running", ge=1, le=64))
    spill: Spill = field(metadata=knob("what happens to a request the burst cannot take"))
    burst_share: float = field(metadata=knob("fraction of a burst pool", ge=0, le=1, pool_share=True))


@dataclass(frozen=True, kw_only=True)
class BurstPolicy(Policy):
    classes: Mapping[str, BurstClassPolicy] = field(metadata=knob("classes with bursts", nonempty=True))


def _with_burst_keys(**overrides: Any) -> dict[str, Any]:
    data = default_policy_dict()
    for c in data["classes"].values():
        c.update(max_burst=4, spill="disk", burst_share=0.25)
    for path, value in overrides.items():
        cls, key = path.split(".")
        if value is None:
            del data["classes"][cls][key]
        else:
            data["classes"][cls][key] = value
    return data


def test_a_new_dataclass_field_is_loaded_with_its_type_and_no_loader_change() -> None:
    policy = policy_from_dict(_with_burst_keys(**{"document_qa.max_burst": 9, "bulk_extraction.spill": "drop"}),
                              source="burst.toml", schema=BurstPolicy)
    docs, bulk = policy.get("document_qa"), policy.get("bulk_extraction")
    assert isinstance(docs, BurstClassPolicy) and isinstance(bulk, BurstClassPolicy)
    assert (docs.max_burst, docs.spill, bulk.spill) == (9, Spill.DISK, Spill.DROP)
    assert docs.max_input_tokens == load_policy().get("document_qa").max_input_tokens  # old knobs unchanged


@pytest.mark.parametrize(("overrides", "key", "problem"), [
    ({"realtime_risk.max_burst": 0}, "classes.realtime_risk.max_burst", "must be in [1, 64], got 0"),
    ({"realtime_risk.max_burst": "many"}, "classes.realtime_risk.max_burst", "must be an integer"),
    ({"document_qa.max_burst": None}, "classes.document_qa.max_burst", "missing required key"),
    ({"document_qa.spill": "swap"}, "classes.document_qa.spill", "must be one of 'disk', 'drop', not 'swap'"),
    ({"realtime_risk.burst_share": 0.75}, "classes.*.burst_share", "shares sum to 1.25"),
])
def test_a_new_fields_metadata_is_enforced(overrides: dict[str, Any], key: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy_from_dict(_with_burst_keys(**overrides), source="burst.toml", schema=BurstPolicy)
    assert (err.value.source, err.value.key) == ("burst.toml", key)
    assert problem in str(err.value)


def test_the_base_schema_rejects_the_new_key_and_lists_what_it_accepts() -> None:
    with pytest.raises(PolicyError) as err:
        policy_from_dict(_with_burst_keys(), source="burst.toml")
    assert err.value.key == "classes.realtime_risk.burst_share"  # the first unknown key, alphabetically
    listed = re.search(r"allowed here: (.*)\)$", str(err.value))
    assert listed is not None
    in_file = {f.name for f in dataclasses.fields(ClassPolicy)
               if knob_of(f, ClassPolicy).in_file and not knob_of(f, ClassPolicy).from_key}
    assert set(listed.group(1).split(", ")) == in_file


def test_every_policy_field_declares_a_knob_with_a_description() -> None:
    for cls in POLICY_TYPES:
        for f in dataclasses.fields(cls):
            assert knob_of(f, cls).doc.strip(), f"{cls.__name__}.{f.name}"


@dataclass(frozen=True, kw_only=True)
class Forgotten(ClassPolicy):
    burst: int = 4


@dataclass(frozen=True, kw_only=True)
class ForgottenPolicy(Policy):
    classes: Mapping[str, Forgotten] = field(metadata=knob("classes"))


def test_a_field_without_knob_metadata_is_refused_as_a_programming_error() -> None:
    with pytest.raises(TypeError, match="Forgotten.burst has no knob"):
        policy_from_dict(default_policy_dict(), schema=ForgottenPolicy)


def test_optional_key_may_be_left_out(write_policy: Callable[..., Path]) -> None:
    def drop_description(d: dict[str, Any]) -> None:
        del d["classes"]["bulk_extraction"]["description"]

    assert load_policy(write_policy(drop_description)).get("bulk_extraction").description == ""


def test_policy_objects_are_built_with_named_fields_only() -> None:
    slo = load_policy().get("realtime_risk").slo
    with pytest.raises(TypeError):
        SLOTargets(1.0, 2.0, 3.0, 99.0, 0.99)  # type: ignore[misc]
    assert dataclasses.replace(slo, ttft_ms=5.0).ttft_ms == 5.0


def test_default_toml_gives_a_reason_for_every_knob() -> None:
    """Each `key = value` line of the class and classification tables carries a '# why' comment
    (a multi-line string value, which cannot carry one, has it on the line above). In the risk rule pack a
    rule's or a mitigation's `source` is its why (its when, unless, group, offsets, reason and source lines need
    no comment; points, action and keep do), and the vocabulary's entries (facts, checks, translations) are names,
    not decisions; the word model's tables are fitted (evals/risk_fit.py), their why is the fit."""
    text = resources.files("policies").joinpath("default.toml").read_text(encoding="utf-8")
    section, undocumented, seen, previous = "", [], set(), ""
    pack: dict[str, set[str]] = {"facts": set(), "checks": set(), "rules": set(), "mitigations": set()}
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif re.match(r"^[a-z0-9_]+ *=", line) and not section.endswith(
                ("routes", "country_lists", "translations", "word_model", "word_weights", "review_model",
                 "review_weights", "block_model", "block_weights")):
            key = line.split("=")[0].strip()
            part = next((p for p in pack if f".risk_rules.{p}." in section), None)
            (pack[part] if part else seen).add(key)
            multi_line = line.rstrip().endswith("'''") and previous.startswith("#")
            exempt = part in ("facts", "checks") or part in ("rules", "mitigations") and key in (
                "when", "unless", "group", "offsets", "reason", "source")
            if key != "description" and "#" not in line and not multi_line and not exempt:
                undocumented.append(f"[{section}] {key}")
        previous = line
    assert not undocumented
    tables = ("routes", "slo", "risk_rules", "facts", "country_lists", "rules", "mitigations", "checks",
              "translations", "speculative", "word_model", "word_weights", "review_model",
              "review_weights", "block_model", "block_weights")  # [sections]
    expected = {f.name for cls in (ClassPolicy, SLOTargets, ClassificationRules, RoutingPolicy, RiskRules, Speculation)
                for f in dataclasses.fields(cls)
                if knob_of(f, cls).in_file and not knob_of(f, cls).from_key and f.name not in tables}
    assert seen == expected
    assert pack["rules"] == {f.name for f in dataclasses.fields(RiskRule)}  # every rule knob used somewhere
    assert pack["facts"] == {f.name for f in dataclasses.fields(RiskFact)}
    assert pack["checks"] == {f.name for f in dataclasses.fields(RiskCheck)}
    assert pack["mitigations"] == {f.name for f in dataclasses.fields(RiskMitigation)}
