"""README's quick tour, run as written against the code: so the README and the code cannot drift apart.

The tour's code block is parsed (continued lines joined, comments dropped); each `curl` is sent to a live
gateway (uvicorn, the default model, Redis and a real Celery worker: the stack `make run` starts), each
`.venv/bin/finserve` runs as a process. Only what the reader fills in is filled in: the URL of this test's
stack, the development key (an admin key of tenant "dev"), DOC_ID (the id the document's registration
answered) and REQUEST_ID (the last request's X-Request-Id); /tmp/ paths go to the test's own folder. A
`# →` line after a command is its claim: every `"key": value` pair must be in the JSON answer (a string
value with `...` matches as a pattern; an SSE stream's deltas are joined into `"content"`), and a claim
with no pair must be in a command's output.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from core.db.base import make_engine, make_session_factory
from core.keys import create_key
from core.settings import Settings
from engine.client import EngineClient
from engine.engine import LLMEngine
from policies import load_policy
from stack.processes import FINSERVE
from tests.jobs.stack import Stack, start_stack

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


@dataclass
class Step:
    command: str
    claims: list[str] = field(default_factory=list)


def tour() -> list[Step]:
    """The commands of README's quick tour block, each with the `# →` claims that follow it."""
    text = README.read_text()
    block = text[text.index("## Quick tour"):]
    block = block[block.index("```bash\n") + len("```bash\n"):block.index("\n```", block.index("```bash"))]
    steps: list[Step] = []
    pending = ""
    for line in block.splitlines():
        stripped = line.strip()
        if stripped.startswith("# →"):
            steps[-1].claims.append(stripped[len("# →"):].strip())
            continue
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        pending += " " + stripped
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quoted string goes on to the next line
            continue
        steps.append(Step(pending.strip()))
        pending = ""
    return steps


def test_the_tour_parses_into_the_commands_a_reader_runs() -> None:
    steps = tour()
    kinds = [s.command.split()[0] for s in steps]
    assert kinds[0] == "export" and set(kinds[1:]) == {"curl", ".venv/bin/finserve"}
    assert len(steps) >= 12 and sum(bool(s.claims) for s in steps) >= 5
    chat = next(s for s in steps if "/v1/chat/completions" in s.command)
    assert '"temperature": 0' in chat.command  # at OpenAI's 1.0 the 135M model answers at random
    assert not any(re.search(r"> *[\w.-]+\.html", s.command) and "/tmp/" not in s.command for s in steps)
    assert not any("results/" in s.command for s in steps)  # never overwrite a tracked results file


def test_the_readme_stays_short() -> None:
    """Detail belongs in docs/ (CLI.md, TROUBLESHOOTING.md, BENCHMARKS.md); the README is read whole."""
    assert len(README.read_bytes()) < 15_000


# ---- running it ---------------------------------------------------------------------------------
@pytest.fixture
def tour_stack(tmp_path: Path, default_model_dir: Path) -> Iterator[tuple[Stack, str]]:
    """`make run`'s stack on a free port: the default model with the settings `finserve up` gives it."""
    torch.set_num_threads(2)
    db_url = f"sqlite:///{tmp_path / 'finserve.db'}"
    from core.db.migrate import upgrade

    upgrade(db_url)
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        dev_key, worker_key = create_key(s, "dev", admin=True), create_key(s, "ops", worker=True)
    engine.dispose()
    settings = Settings(model=default_model_dir, threads=2, kv_cache_memory_bytes=256 << 20)
    client = EngineClient(LLMEngine(settings.engine_config(load_policy()))).start()
    stack = start_stack(tmp_path, db_url, dev_key, worker_key, client)
    # `finserve up`'s leases and timeouts, not the fault tests' seconds: the default model's items take longer
    stack.start_worker("tour", concurrency=4, env={"FINSERVE_JOBS_LEASE_S": "600",
                                                   "FINSERVE_JOBS_REQUEST_TIMEOUT_S": "540"})
    try:
        yield stack, dev_key
    finally:
        stack.close()
        client.shutdown()


@dataclass
class Answer:
    text: str
    doc: Any  # the parsed JSON, or the list of an SSE stream's events
    request_id: str | None = None


def _expand(command: str, env: dict[str, str], tmp: Path) -> str:
    for name, value in env.items():
        command = command.replace(f"${name}", value)
    return command.replace("/tmp/", f"{tmp}/")


def _curl(argv: list[str], out_dir: Path) -> Answer:
    method, headers, body, url, sink = "GET", {}, None, None, None
    args = iter(argv[1:])
    for a in args:
        if a == "-s":
            continue
        if a == "-X":
            method = next(args)
        elif a == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif a == "-d":
            body, method = next(args), "POST" if method == "GET" else method
        elif a == ">":
            sink = Path(next(args))
        else:
            url = a
    assert url is not None, argv
    r = httpx.request(method, url, headers=headers, content=body, timeout=300)
    assert r.is_success, (argv, r.status_code, r.text[:500])
    if sink is not None:
        assert sink.parent == out_dir, sink  # a file the tour writes lands outside the repository
        sink.write_bytes(r.content)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        doc: Any = events
    else:
        doc = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    return Answer(r.text, doc, r.headers.get("x-request-id"))


def _finserve(argv: list[str], stack: Stack, env: dict[str, str]) -> Answer:
    proc_env = {**stack.env, "FINSERVE_GATEWAY_URL": env["URL"], "FINSERVE_API_KEY": env["KEY"],
                "PYTHONPATH": str(ROOT)}
    done = subprocess.run([FINSERVE, *argv[1:]], cwd=ROOT, env=proc_env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, (argv, done.returncode, done.stderr[-2000:])
    return Answer(done.stdout + done.stderr, None)


def _values(doc: Any, key: str) -> Iterator[Any]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key:
                yield v
            yield from _values(v, key)
    elif isinstance(doc, list):
        for v in doc:
            yield from _values(v, key)


def _streamed_content(events: list[Any]) -> str:
    return "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", []))


def check_claim(claim: str, answer: Answer) -> None:
    pairs = re.findall(r'"(\w+)": ("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null)', claim)
    if not pairs:
        assert claim in answer.text, (claim, answer.text[-1500:])
        return
    doc = answer.doc
    if isinstance(doc, list):  # an SSE stream: its deltas' text as one "content"
        doc = {"events": doc, "content": _streamed_content(doc)}
    for key, raw in pairs:
        expected = json.loads(raw)
        found = list(_values(doc, key))
        if isinstance(expected, str) and "..." in expected:
            pattern = ".*".join(re.escape(part) for part in expected.split("..."))
            ok = any(isinstance(v, str) and re.fullmatch(pattern, v, flags=re.S) for v in found)
        else:
            ok = expected in found
        assert ok, f'README says "{key}": {raw}; the answer has {found[:5]}: {answer.text[:800]}'


@pytest.mark.slow
def test_every_tour_command_does_what_the_readme_says(tour_stack: tuple[Stack, str], tmp_path: Path) -> None:
    stack, dev_key = tour_stack
    env: dict[str, str] = {}
    doc_id = request_id = None
    for step in tour():
        if step.command.startswith("export "):
            for name, value in re.findall(r"(\w+)=(<[^>]*>|\S+)", step.command):
                env[name] = dev_key if name == "KEY" else stack.gateway.url if name == "URL" else value
            assert env["URL"] and env["KEY"]
            continue
        command = _expand(step.command, env, tmp_path)
        if "DOC_ID" in command:
            assert doc_id is not None, "a tour command uses DOC_ID before a document was registered"
            command = command.replace("DOC_ID", doc_id)
        if "REQUEST_ID" in command:
            assert request_id is not None
            command = command.replace("REQUEST_ID", request_id)
        argv = shlex.split(command, comments=True)
        answer = _curl(argv, tmp_path) if argv[0] == "curl" else _finserve(argv, stack, env)
        for claim in step.claims:
            check_claim(claim, answer)
        if isinstance(answer.doc, dict) and answer.doc.get("object", "document") == "document" \
                and str(answer.doc.get("id", "")).startswith("doc-"):
            doc_id = answer.doc["id"]  # the registration's answer
        request_id = answer.request_id or request_id
    assert (tmp_path / "finserve-report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert json.loads((tmp_path / "finserve-extraction.json").read_text())
    assert not os.path.exists(ROOT / "report.html")
