"""The image the deploy files name: built by `make image` under the tag they all use, loadable into a cluster
(not `finserve:latest`, which Kubernetes always tries to pull), and able to run the whole stack alone.

Docker is not needed: the tag and pull policy are read from the files, and the image's default command is run
for real here (it is a shell line over the installed `finserve`), as the container would run it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from jobs.redis_server import free_port
from tests.deploy.manifests import DEPLOY_DOC, DOCKERFILE, ROOT, compose, k8s_objects

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"finserve:{VERSION}"


def finserve_containers() -> list[dict]:
    spec = [o["spec"]["template"]["spec"] for o in k8s_objects() if o["kind"] in ("Deployment", "StatefulSet")]
    return [c for s in spec for c in s.get("initContainers", []) + s["containers"]
            if c["image"].startswith("finserve")]


def test_every_deploy_file_names_the_image_make_builds() -> None:
    make = (ROOT / "Makefile").read_text()
    assert re.search(rf"^IMAGE \?= {re.escape(IMAGE)}$", make, flags=re.M)
    recipe = make[make.index("\nimage:"):].split("\n\n")[0]
    assert "docker build -f deploy/Dockerfile -t $(IMAGE) ." in recipe
    assert {s["image"] for s in compose()["services"].values() if s["image"].startswith("finserve")} == {IMAGE}
    containers = finserve_containers()
    assert len(containers) >= 4 and {c["image"] for c in containers} == {IMAGE}
    assert {c.get("imagePullPolicy") for c in containers} == {"IfNotPresent"}  # a loaded image is used as is


def test_the_docs_say_how_to_build_and_load_it() -> None:
    doc = DEPLOY_DOC.read_text()
    section = doc[doc.index("## The image"):doc.index("## Compose")]
    assert "make image" in section and f"kind load docker-image {IMAGE}" in section
    assert f"minikube image load {IMAGE}" in section and f"docker run -p 8000:8000 {IMAGE}" in section


def dockerfile_cmd() -> list[str]:
    line = next(x for x in DOCKERFILE.read_text().splitlines() if x.startswith("CMD "))
    cmd: list[str] = json.loads(line[len("CMD "):])
    return cmd


def test_the_default_command_runs_the_whole_stack() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ENV .*FINSERVE_HOST=0\.0\.0\.0", text, flags=re.M)  # reachable from outside the container
    assert dockerfile_cmd() == ["sh", "-c", "finserve model prepare && exec finserve up"]


@pytest.mark.slow
def test_the_default_command_serves_when_run(tmp_path: Path, default_model_dir: Path,
                                             make_tiny_model) -> None:  # type: ignore[no-untyped-def]
    """The image's CMD as the container runs it, with the installed `finserve` on PATH: the model step finds
    the prepared model (as a second start would), `finserve up` starts Redis, a worker and the gateway, says
    "finserve ready at", and answers; SIGTERM stops it all."""
    home = tmp_path / "data"
    (home / "models").mkdir(parents=True)
    (home / "models" / default_model_dir.name).symlink_to(default_model_dir)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FINSERVE_")} | {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "FINSERVE_HOME": str(home),
        "FINSERVE_HOST": "127.0.0.1", "FINSERVE_PORT": str(port), "FINSERVE_THREADS": "1",
        "FINSERVE_LOG_JSON": "true", "FINSERVE_KV_CACHE_MEMORY_BYTES": str(16 << 20),
        # the tiny model keeps the run light; the default one is what `model prepare` just found
        "FINSERVE_MODEL": str(make_tiny_model(max_position_embeddings=8192))}
    err = tmp_path / "stderr"
    with err.open("wb") as e:
        proc = subprocess.Popen(dockerfile_cmd(), env=env, stdout=subprocess.DEVNULL, stderr=e, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "finserve ready at" not in err.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        key = (home / "dev_key").read_text().strip()
        assert f"finserve ready at http://127.0.0.1:{port} (key: {key})" in err.read_text(errors="replace")
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        assert "model already prepared" in err.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert proc.returncode == 0, err.read_text(errors="replace")[-3000:]
