"""Fair share among tenants inside one class: per-tenant queue slots and weighted fair queueing.

Issue 23 finding 4: tenant B's burst of realtime requests filled the class queue, and tenant A's
requests were refused (429) or waited behind the whole burst. Here a burst is refused to its own
tenant, and the other tenant's requests are served in the next free slot, not after the burst.
"""
from __future__ import annotations

import pytest

from engine.outputs import AdmissionError
from tests.engine.sched_sim import BATCH, DOCS, URGENT, Sim, make_policy, make_scheduler, variant


def _sim(**urgent_changes) -> Sim:
    urgent = variant(URGENT, **({"queue_limit": 8, "max_running": 1} | urgent_changes))
    return Sim(make_scheduler(make_policy(urgent, DOCS, BATCH)))


def _start_order(sim: Sim) -> list[str]:
    sim.run()
    firsts: dict[str, int] = {}
    for i, out in enumerate(sim.steps):
        for seq in out.seqs:
            firsts.setdefault(seq.request.request_id, i)
    return sorted(firsts, key=firsts.__getitem__)


def test_a_tenants_burst_is_refused_to_that_tenant_while_another_still_queues():
    sim = _sim(tenant_queue_share=0.5)  # 4 of the 8 slots per tenant
    for i in range(5):  # the first takes the class's one free batch slot: it does not wait for capacity
        sim.add(f"b{i}", 4, "urgent", tenant="b")
    with pytest.raises(AdmissionError) as exc:
        sim.add("b5", 4, "urgent", tenant="b")
    assert exc.value.reason == "tenant_queue_full" and exc.value.retryable and exc.value.retry_after_s >= 1.0
    assert "'b'" in exc.value.message
    for i in range(4):  # tenant a finds its own share of the queue free
        sim.add(f"a{i}", 4, "urgent", tenant="a")
    with pytest.raises(AdmissionError) as full:
        sim.add("c0", 4, "urgent", tenant="c")  # the class queue itself still has its limit
    assert full.value.reason == "queue_full"
    assert sim.sched.stats().per_class["urgent"].rejections == {"tenant_queue_full": 1, "queue_full": 1}


def test_a_tenant_whose_requests_start_gets_its_slots_back():
    sim = _sim(tenant_queue_share=0.25)  # 2 waiting per tenant (beyond the class's one batch slot)
    for i in range(3):
        sim.add(f"b{i}", 4, "urgent", tenant="b", max_tokens=2)
    with pytest.raises(AdmissionError):
        sim.add("b3", 4, "urgent", tenant="b")
    sim.step()  # b0 runs in the one slot; b1, b2 still wait
    with pytest.raises(AdmissionError):
        sim.add("b3", 4, "urgent", tenant="b")
    while "b0" in sim.sched.running:
        sim.step()
    sim.add("b3", 4, "urgent", tenant="b")  # b0 finished: its slot is free for b1, so b3 may wait in b1's place


def test_a_job_keeping_its_slots_and_share_in_flight_is_not_refused_when_several_finish_at_once():
    # bulk_extraction's shape: max_running slots + the tenant's share in flight; several items finish in
    # one step and their successors arrive before the next steps can prefill them all.
    sim = _sim(max_running=4, queue_limit=8, tenant_queue_share=0.5)  # 4 slots + 4 waiting per tenant
    for i in range(8):
        sim.add(f"j{i}", 4, "urgent", tenant="job", max_tokens=1)
    sim.step()  # the four slots' requests finish in one step: four free slots, four waiting
    for i in range(8, 12):
        sim.add(f"j{i}", 4, "urgent", tenant="job", max_tokens=1)
    assert sim.sched.stats().per_class["urgent"].rejections == {}


def test_another_tenants_request_is_served_next_not_after_the_burst():
    sim = _sim()
    for i in range(6):
        sim.add(f"b{i}", 4, "urgent", tenant="b", max_tokens=1)
    sim.add("a0", 4, "urgent", tenant="a", max_tokens=1)
    sim.add("a1", 4, "urgent", tenant="a", max_tokens=1)
    # One slot: b0 first (it came first), then the tenants take turns while both wait.
    assert _start_order(sim) == ["b0", "a0", "b1", "a1", "b2", "b3", "b4", "b5"]


def test_weights_give_a_tenant_proportionally_more_turns():
    sim = _sim(tenant_weights={"b": 2.0}, queue_limit=16)
    for i in range(6):
        sim.add(f"b{i}", 4, "urgent", tenant="b", max_tokens=1)
    for i in range(3):
        sim.add(f"a{i}", 4, "urgent", tenant="a", max_tokens=1)
    order = _start_order(sim)
    # Over the first six turns b (weight 2) gets four, a (weight 1) two.
    assert sum(r.startswith("b") for r in order[:6]) == 4, order


def test_one_tenant_is_still_first_come_first_served():
    sim = _sim()
    for i in range(5):
        sim.add(f"r{i}", 4, "urgent", max_tokens=1)
    assert _start_order(sim) == [f"r{i}" for i in range(5)]


def test_fair_queueing_stays_inside_a_priority():
    sim = _sim()
    for i in range(3):
        sim.add(f"d{i}", 4, "docs", tenant="a", max_tokens=1)
    sim.add("u0", 4, "urgent", tenant="b", max_tokens=1)
    assert _start_order(sim)[0] == "u0"  # a higher class still goes first, whoever its tenant is


def _running_tenants(sim: Sim) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in sim.sched.running.values():
        out[r.tenant] = out.get(r.tenant, 0) + 1
    return out


def test_a_burst_leaves_the_last_slot_to_a_tenant_with_none_running():
    # Issue 45 finding 5: one tenant's burst held all of realtime's slots, and another tenant's request waited
    # for the burst's first finish (~1 s), past its TTFT target. The class keeps its last slot for such a tenant.
    sim = _sim(max_running=4, queue_limit=64, tenant_reserved_slots=1)
    for i in range(20):
        sim.add(f"a{i}", 4, "urgent", tenant="a", max_tokens=16)
    for _ in range(3):
        sim.step()
    assert _running_tenants(sim) == {"a": 3}  # the fourth slot stays free while only "a" has work
    sim.add("b0", 4, "urgent", tenant="b", max_tokens=16)
    sim.step()
    assert _running_tenants(sim) == {"a": 3, "b": 1}  # b0 started in the very next step
    sim.add("b1", 4, "urgent", tenant="b", max_tokens=16)  # "b" now has one running: it waits its fair turn
    sim.add("c0", 4, "urgent", tenant="c", max_tokens=16)
    sim.step()
    assert "b1" not in sim.sched.running and "c0" not in sim.sched.running  # every slot is taken
    sim.run()  # and everything still finishes


def test_without_reserved_slots_the_burst_holds_every_slot():
    sim = _sim(max_running=4, queue_limit=64)
    for i in range(20):
        sim.add(f"a{i}", 4, "urgent", tenant="a", max_tokens=16)
    for _ in range(3):
        sim.step()
    sim.add("b0", 4, "urgent", tenant="b", max_tokens=16)
    sim.step()
    assert _running_tenants(sim) == {"a": 4}


def test_the_default_policy_keeps_a_realtime_slot_for_another_tenant():
    from policies import load_policy

    risk = load_policy().get("realtime_risk")
    assert 0 < risk.tenant_reserved_slots < risk.max_running
