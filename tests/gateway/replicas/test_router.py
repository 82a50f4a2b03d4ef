"""The replica picker, as pure functions over load snapshots (no servers)."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.replicas.router import (
    ReplicaLoad,
    RoutingConfig,
    affinity_key,
    pick,
    pick_affinity,
    pick_least_kv,
    pick_least_waiting,
    pick_round_robin,
    rendezvous_order,
)

CFG = RoutingConfig()
NAMES = [f"http://10.0.0.{i}:8100" for i in range(4)]
SYSTEM = list(range(40))  # a shared system prompt before every document


def replicas(**overrides: dict) -> list[ReplicaLoad]:
    return [ReplicaLoad(name=n, healthy=True, **overrides.get(n, {})) for n in NAMES]


def doc_prompt(doc: int, question: int) -> list[int]:
    document = [1000 + doc * 997 + i for i in range(600)]
    return SYSTEM + document + [50_000 + question, 7, 8, 9]


def test_every_question_on_a_document_goes_to_one_replica() -> None:
    rs = replicas()
    for doc in range(8):
        chosen = {pick("document_qa", doc_prompt(doc, q), "acme", rs, CFG, random.Random(q)).replica
                  for q in range(6)}
        assert len(chosen) == 1


def test_documents_spread_over_the_replicas() -> None:
    rs = replicas()
    counts = Counter(pick("document_qa", doc_prompt(d, 0), "acme", rs, CFG, random.Random()).replica
                     for d in range(200))
    assert set(counts) == set(NAMES)
    assert min(counts.values()) > 200 / len(NAMES) / 2  # roughly even, none starved


def test_the_tenant_salt_is_part_of_the_key() -> None:
    keys = {affinity_key(doc_prompt(0, 0), salt, CFG) for salt in ("acme", "globex")}
    assert len(keys) == 2


def test_a_short_prompt_keys_on_its_head_not_its_question() -> None:
    short_a = SYSTEM + list(range(100, 140)) + [1, 2, 3]
    short_b = SYSTEM + list(range(100, 140)) + [4, 5, 6]
    assert affinity_key(short_a, "acme", CFG) == affinity_key(short_b, "acme", CFG)


def test_questions_of_any_length_on_a_short_document_share_its_key() -> None:
    """With at most half the prompt hashed, a longer question moved the key past another block boundary: a
    follow-up went to another replica and prefilled the document cold (issue 49). The shared prefix the
    documents route knows keeps one key."""
    document = SYSTEM + list(range(2000, 2200))
    questions = [document + [60_000 + i for i in range(n)] for n in (3, 40, 90, 160, 300)]
    blind = {affinity_key(q, "acme", CFG) for q in questions}
    told = {affinity_key(q, "acme", CFG, shared_tokens=len(document)) for q in questions}
    assert len(blind) > 1 and len(told) == 1


def test_a_question_away_from_its_home_says_why() -> None:
    key = affinity_key(doc_prompt(5, 0), "acme", CFG)
    home, second = rendezvous_order(key, NAMES)[:2]
    down = [ReplicaLoad(n, healthy=n != home) for n in NAMES]
    decision = pick_affinity(key, down, CFG)
    assert (decision.replica, decision.reason) == (second, "affinity_home_down")
    # down and the next one over the load bound: the first cause is kept
    both = [ReplicaLoad(n, healthy=n != home, in_flight=20 if n == second else 0) for n in NAMES]
    assert pick_affinity(key, both, CFG).reason == "affinity_home_down"


def test_losing_a_replica_moves_only_its_own_documents() -> None:
    keys = [affinity_key(doc_prompt(d, 0), "acme", CFG) for d in range(200)]
    before = {k: rendezvous_order(k, NAMES)[0] for k in keys}
    after = {k: rendezvous_order(k, NAMES[1:])[0] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == NAMES[0] for k in moved)


def test_a_hot_replica_spills_to_the_next_in_rank() -> None:
    key = affinity_key(doc_prompt(3, 0), "acme", CFG)
    home = rendezvous_order(key, NAMES)[0]
    assert pick_affinity(key, replicas(), CFG).reason == "affinity"
    hot = replicas(**{home: {"in_flight": 20}})
    decision = pick_affinity(key, hot, CFG)
    assert decision.replica == rendezvous_order(key, NAMES)[1] and decision.reason == "affinity_spill"


def test_a_few_requests_more_never_move_a_document_off_its_cache() -> None:
    """Under the absolute threshold a question waits behind a few others rather than pay a cold prefill."""
    key = affinity_key(doc_prompt(3, 0), "acme", CFG)
    home = rendezvous_order(key, NAMES)[0]
    busy = replicas(**{home: {"in_flight": CFG.spill_min_excess - 1}})
    assert pick_affinity(key, busy, CFG).replica == home


def test_unhealthy_replicas_are_never_picked() -> None:
    rs = [ReplicaLoad(n, healthy=(i == 2)) for i, n in enumerate(NAMES)]
    rng = random.Random(0)
    for cls in ("document_qa", "realtime_risk", "bulk_extraction"):
        for q in range(10):
            assert pick(cls, doc_prompt(q, q), "acme", rs, CFG, rng).replica == NAMES[2]
    none = [ReplicaLoad(n, healthy=False) for n in NAMES]
    d = pick("realtime_risk", [1, 2], "acme", none, CFG, rng)
    assert d.replica is None and d.reason == "no_healthy_replica"


def test_realtime_goes_to_the_fewer_waiting_of_two_choices() -> None:
    busy = {n: {"waiting": {"realtime_risk": 5}} for n in NAMES[1:]}
    rs = replicas(**busy)
    rng = random.Random(1)
    picks = Counter(pick_least_waiting("realtime_risk", rs, rng).replica for _ in range(400))
    # The idle replica wins every pair it is drawn into: half the draws of two out of four.
    assert picks[NAMES[0]] == pytest.approx(200, abs=40)
    assert pick_least_waiting("realtime_risk", rs, rng).reason == "p2c"


def test_realtime_ignores_other_classes_waiting() -> None:
    rs = [ReplicaLoad(NAMES[0], True, waiting={"bulk_extraction": 50}), ReplicaLoad(NAMES[1], True,
                                                                                    waiting={"realtime_risk": 1})]
    assert pick_least_waiting("realtime_risk", rs, random.Random(0)).replica == NAMES[0]


def test_bulk_goes_to_the_lowest_kv_use_and_is_shed_when_all_are_saturated() -> None:
    rs = replicas(**{n: {"kv_usage": u} for n, u in zip(NAMES, (0.5, 0.2, 0.7, 0.3), strict=True)})
    assert pick_least_kv(rs, CFG).replica == NAMES[1]
    full = replicas(**{n: {"kv_usage": 0.95} for n in NAMES})
    shed = pick_least_kv(full, CFG)
    assert shed.replica is None and shed.reason == "shed_saturated" and shed.retry_after_s
    queued = replicas(**{n: {"waiting": {"bulk_extraction": CFG.saturated_waiting}} for n in NAMES})
    assert pick("bulk_extraction", [1], "acme", queued, CFG, random.Random()).reason == "shed_saturated"


def test_round_robin_takes_turns() -> None:
    rs = replicas()
    assert [pick_round_robin(i, rs).replica for i in range(5)] == NAMES + NAMES[:1]


def test_routing_config_refuses_unknown_strategies() -> None:
    with pytest.raises(ValueError):
        RoutingConfig(strategies={"document_qa": "random"})
    with pytest.raises(ValueError):
        RoutingConfig(load_factor=0.5)


def test_the_policy_file_decides_each_classs_strategy_and_the_knobs() -> None:
    """Routing is data: swapping strategies and tightening the shed bound in the file changes the picks."""
    from policies import load_policy, policy_from_dict
    from tests.policies.conftest import default_policy_dict

    d = default_policy_dict()
    d["classes"]["bulk_extraction"]["routing"] = "least_waiting"
    d["classes"]["realtime_risk"]["routing"] = "least_kv"
    d["routing"]["saturated_kv_usage"] = 0.5
    d["routing"]["shed_retry_after_s"] = 7.0
    cfg = RoutingConfig.from_policy(policy_from_dict(d), block_size=16)
    half_full = [ReplicaLoad(name=n, healthy=True, kv_usage=0.6) for n in NAMES]
    shed = pick("realtime_risk", [1, 2, 3], "", half_full, cfg, random.Random(0))
    assert (shed.replica, shed.reason, shed.retry_after_s) == (None, "shed_saturated", 7.0)
    assert pick("bulk_extraction", [1, 2, 3], "", half_full, cfg, random.Random(0)).reason == "p2c"
    default = RoutingConfig.from_policy(load_policy(), block_size=16)
    assert default.strategy_for("document_qa") == "affinity" and default.saturated_kv == 0.9
