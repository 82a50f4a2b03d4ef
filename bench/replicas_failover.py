"""`finserve bench replicas` part "failover": kill -9 one engine replica under mixed load, restart it.

Mixed load through the gateway (policy routing) over the replicas: `clients` threads per class, each
sending one request after another: realtime_risk completions, document_qa questions on a few registered
documents, bulk_extraction chat completions (ignore_eos, so they stream long enough to be cut). After
`before_s` one replica gets SIGKILL; `down_s` later it is started again on the same port; the load goes on
for `after_s` after it is ready again.

Checked afterwards, from the responses and the gateway's ledger (flushed first):
  lost               responses whose request id has no ledger row, or a row with another HTTP status
  non_json_errors    non-200 responses without the {"error": {"code", "message", "request_id"}} shape
  transport_errors   requests that got no HTTP response at all (the gateway itself never went away)
  failed_not_in_flight  failed rows that were not on the killed replica, or arrived after the kill:
                     a request that had not started must be served by the other replica, not fail
  failovers          rows whose replica reason is failover:* (tried the dead replica first), by status
  rejoined           requests arriving after the restart that the restarted replica served
"""
from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from stack.processes import EngineProcess

PROMPT = "Rate the counterparty risk of an overnight repo with a BBB-rated bank as low, medium or high."
QUESTION = "Which exposures does this circular exclude?"
CONTRACT = ("Extract the parties, the governing law and the notice period from this contract: This agreement "
            "between Northwind Bank plc and Contoso Capital LLC is governed by English law; either party may end "
            "it with ninety days written notice.")


def _bodies(doc_ids: list[str]) -> dict[str, Callable[[int], tuple[str, dict[str, Any]]]]:
    return {
        "realtime_risk": lambda i: ("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0,
                                                        "workload_class": "realtime_risk"}),
        "document_qa": lambda i: (f"/v1/documents/{doc_ids[i % len(doc_ids)]}/questions",
                                  {"question": QUESTION, "max_tokens": 16}),
        "bulk_extraction": lambda i: ("/v1/chat/completions", {
            "messages": [{"role": "user", "content": CONTRACT}], "max_tokens": 48, "temperature": 0.0,
            "ignore_eos": True, "workload_class": "bulk_extraction"}),
    }


def _error(r: httpx.Response) -> tuple[bool, str | None]:
    """Whether a non-200 response has the JSON error shape, and its code."""
    try:
        err = r.json()["error"]
        ok = all(isinstance(err.get(k), str) and err[k] for k in ("code", "message", "request_id"))
        return ok, str(err.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return False, f"not JSON: {r.text[:80]!r}"


class _Load:
    """Client threads sending requests until stopped; every attempt is recorded."""

    def __init__(self, url: str, key: str, doc_ids: list[str], clients: int) -> None:
        self.url, self.key = url, key
        self.bodies = _bodies(doc_ids)
        self.clients = clients
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(cls, i), daemon=True)
                         for cls in self.bodies for i in range(clients)]

    def start(self) -> _Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(300)

    def _client(self, cls: str, seed: int) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=300) as http:
            i = seed
            while not self._stop.is_set():
                path, body = self.bodies[cls](i)
                i += self.clients
                rec: dict[str, Any] = {"class": cls, "sent": time.time()}
                try:
                    r = http.post(path, json=body)
                    shape_ok, code = (True, None) if r.status_code == 200 else _error(r)
                    rec.update(status=r.status_code, request_id=r.headers.get("x-request-id"), shape_ok=shape_ok,
                               code=code)
                except httpx.TransportError as exc:
                    rec.update(status=0, request_id=None, shape_ok=False, code=f"transport: {exc}")
                rec["done"] = time.time()
                with self._lock:
                    self.records.append(rec)
                if rec["status"] in (429, 503):
                    time.sleep(0.5)  # as a client honouring Retry-After would, briefly


def run_failover(url: str, key: str, engines: list[EngineProcess], *, doc_ids: list[str],
                 restart: Callable[[EngineProcess], EngineProcess], rows: Callable[[list[str]], dict[str, Any]],
                 clients: int = 2, before_s: float = 10.0, down_s: float = 8.0, after_s: float = 15.0
                 ) -> tuple[dict[str, Any], EngineProcess]:
    """Runs the scenario; returns the report and the restarted replica's process (the caller stops it).

    `restart(victim)` starts the killed replica again on its port and waits until it is ready;
    `rows(request_ids)` returns the ledger rows (flushed) by request id.
    """
    victim = engines[0]
    load = _Load(url, key, doc_ids, clients).start()
    time.sleep(before_s)
    t_kill = time.time()
    victim.proc.send_signal(signal.SIGKILL)
    time.sleep(down_s)
    back = restart(victim)
    t_ready = time.time()
    time.sleep(after_s)
    load.stop()
    got = [r for r in load.records if r["request_id"]]
    ledger = rows([r["request_id"] for r in got])
    return _report(load.records, ledger, victim.url, t_kill, t_ready,
                   dict(clients_per_class=clients, before_s=before_s, down_s=down_s, after_s=after_s)), back


def _report(records: list[dict[str, Any]], ledger: dict[str, Any], victim: str, t_kill: float, t_ready: float,
            config: dict[str, Any]) -> dict[str, Any]:
    lost = [f"{r['request_id']}: HTTP {r['status']}, ledger " + (
        f"{row.status} HTTP {row.http_status}" if (row := ledger.get(r["request_id"])) is not None else "none")
        for r in records if r["request_id"] and (
            r["request_id"] not in ledger or ledger[r["request_id"]].http_status != r["status"])]
    failed = [row for row in ledger.values() if row.status == "failed"]
    placed = {rid: (row.timeline or {}).get("replica") or {} for rid, row in ledger.items()}
    bad_failures = [row.request_id for row in failed
                    if placed[row.request_id].get("url") != victim or row.arrival_at.timestamp() > t_kill]
    failovers = Counter(row.status for rid, row in ledger.items()
                        if str(placed[rid].get("reason", "")).startswith("failover:"))
    after = [rid for rid, row in ledger.items() if row.arrival_at.timestamp() > t_ready + 2.0]
    responses = Counter(f"{r['class']} {r['status']}{' ' + r['code'] if r['code'] else ''}" for r in records)
    return {
        "config": config,
        "victim": victim,
        "requests": len(records),
        "responses": dict(sorted(responses.items())),
        "ledger_statuses": dict(sorted(Counter(f"{row.workload_class} {row.status}" for row in ledger.values()).items())),
        "lost": len(lost),
        "lost_examples": lost[:10],
        "non_json_errors": sum(1 for r in records if r["status"] and not r["shape_ok"]),
        "transport_errors": sum(1 for r in records if r["status"] == 0),
        "failed_in_flight_on_victim": len(failed) - len(bad_failures),
        "failed_not_in_flight": len(bad_failures),
        "failovers": dict(failovers),
        "requests_after_rejoin": len(after),
        "rejoined": sum(1 for rid in after if placed[rid].get("url") == victim),
        "kill_to_ready_s": t_ready - t_kill,
    }
