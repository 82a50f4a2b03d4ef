"""One grammar child process: `python -m engine.grammar_child --stack-bytes N`, started by engine/grammar_pool.py.

It reads length-prefixed JSON frames on stdin and answers each with one on stdout (`read_frame`,
`write_frame`), one request at a time:

    {"op": "tokenizer", "key", "json", "eos"}     -> {"ok": true}: llguidance's view of a vocabulary, kept
    {"op": "compile", "kind", "spec", "tokenizer"} -> {"grammar", "schema", "error", "problem"}
    {"op": "segfault"}                             -> no answer: the process kills itself with SIGSEGV (the
                                                      pool's test of a child that dies; nothing a client sends
                                                      reaches it)

`compile` runs engine/grammar_check.py on a thread whose stack is `--stack-bytes`: a schema that would
overflow it kills this process, not the server, and one that fits compiles within the same bound in the
parent's larger thread stacks. `error` is why the constraint is invalid (None: valid, `grammar` set);
`problem` is what the probe found with the tokenizer (None: decodable, or no tokenizer given).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import sys
import threading
from typing import IO, Any

import llguidance

from engine import grammar_check
from engine.grammar_pool import read_frame, write_frame

PR_SET_PDEATHSIG = 1  # linux/prctl.h (core/parent_death.py has the same: engine imports nothing of core)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` when the parent exits (PR_SET_PDEATHSIG); elsewhere end of input does it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


class _Child:
    def __init__(self) -> None:
        self.tokenizers: dict[str, llguidance.LLTokenizer] = {}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request["op"] == "tokenizer":
            self.tokenizers[request["key"]] = llguidance.LLTokenizer(request["json"], eos_token=request["eos"])
            return {"ok": True}
        kind, spec = request["kind"], request["spec"]
        try:
            grammar, schema = grammar_check.grammar_of(kind, spec)
        except ValueError as exc:
            return {"grammar": None, "schema": None, "error": str(exc), "problem": None}
        ll = self.tokenizers.get(request["tokenizer"] or "")
        problem = None
        if ll is not None:
            problem = grammar_check.probe(ll, grammar) or grammar_check.unwritable(ll, kind, spec)
        return {"grammar": grammar, "schema": schema, "error": None, "problem": problem}


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    child = _Child()
    while (request := read_frame(stdin)) is not None:
        if request["op"] == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        answer: dict[str, Any] = {}

        def run(req: dict[str, Any] = request, out: dict[str, Any] = answer) -> None:
            try:
                out.update(child.handle(req))
            except BaseException as exc:  # noqa: BLE001 -- a Rust panic is a BaseException (pyo3's PanicException)
                out.update(grammar=None, schema=None, problem=None,
                           error=f"the grammar compiler failed: {type(exc).__name__}: {str(exc)[:300]}")

        worker = threading.Thread(target=run, name="grammar-compile")  # the bounded stack (threading.stack_size)
        worker.start()
        worker.join()
        write_frame(stdout, answer)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.grammar_child")
    parser.add_argument("--stack-bytes", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash here is expected now and then: no core files
    threading.stack_size(args.stack_bytes)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
