"""`python -m core.parent_death --parent PID --signal SIG -- PROGRAM ARGS...`: run PROGRAM so that it gets SIG when
the process that started it dies, however it dies (kill -9, a segfault), not only when it stops its children.

`finserve up` owns Redis, its workers and engine replicas; when `up` was killed or crashed they used to stay
behind (Redis holding its port, so the next `up` on that port refused to start). Linux's PR_SET_PDEATHSIG is
inherited across exec, so this small launcher sets it and then becomes PROGRAM itself (same pid, so a check
of the child's pid, like Redis's owner check, still holds). If the parent is already gone when the flag is
set, PROGRAM never starts. The "parent" is the thread that started this launcher: it must outlive the child
(stack/supervisor.py keeps its thread for that reason). Elsewhere than Linux `with_parent_death` leaves argv
as it is.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def with_parent_death(argv: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """`argv` run through this launcher: it gets `sig` when this process dies. Unchanged off Linux."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-m", "core.parent_death", "--parent", str(os.getpid()), "--signal", str(int(sig)),
            "--", *argv]


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m core.parent_death")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--signal", type=int, required=True)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, ns.signal) != 0:
        raise SystemExit(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != ns.parent:  # the parent died before the flag was set: nobody would stop the child
        raise SystemExit(f"parent {ns.parent} is gone; not starting {argv[0]}")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
