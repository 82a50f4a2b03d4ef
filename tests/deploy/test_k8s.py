"""deploy/k8s/*.yaml, checked without a cluster: every object well formed, commands parsed by the real CLI,
variables known to the settings, the engines' names and ports wired into the gateway and the InferencePool,
one InferenceObjective per policy class in the policy's priority order, and the policy ConfigMap current."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from policies import load_policy
from tests.deploy.manifests import k8s_objects, option, parse_finserve, unknown_settings


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in k8s_objects() if o["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in by_kind(kind) if o["metadata"]["name"] == name]
    return obj


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


WORKLOADS = ("Deployment", "StatefulSet")


def test_every_object_is_well_formed() -> None:
    objs = k8s_objects()
    assert objs
    for o in objs:
        assert o.get("apiVersion") and o.get("kind") and o["metadata"].get("name"), o["_file"]
    for w in (o for o in objs if o["kind"] in WORKLOADS):
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert w["spec"]["selector"]["matchLabels"].items() <= labels.items(), w["metadata"]["name"]
    pods = [o["spec"]["template"]["metadata"]["labels"] for o in objs if o["kind"] in WORKLOADS]
    for svc in by_kind("Service"):
        assert any(svc["spec"]["selector"].items() <= p.items() for p in pods), svc["metadata"]["name"]


def test_finserve_commands_parse_and_variables_are_settings() -> None:
    seen = set()
    for w in (o for o in k8s_objects() if o["kind"] in WORKLOADS):
        for c in containers(w):
            if c.get("command", [None])[0] == "finserve":
                seen.add(parse_finserve(c["command"])[0])
                assert not unknown_settings(list(env(c))), (w["metadata"]["name"], c["name"])
    assert {"engine", "serve", "worker", "db upgrade", "model prepare"} <= seen


def test_the_gateway_lists_every_engine_pod_by_its_stable_name() -> None:
    sts = named("StatefulSet", "finserve-engine")
    headless = named("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    [engine] = sts["spec"]["template"]["spec"]["containers"]
    port = int(option(engine["command"], "--port"))
    assert engine["ports"][0]["containerPort"] == port
    gateway = named("Deployment", "finserve-gateway")["spec"]["template"]["spec"]["containers"][0]
    urls = env(gateway)["FINSERVE_ENGINES"].split(",")
    name, svc = sts["metadata"]["name"], headless["metadata"]["name"]
    assert urls == [f"http://{name}-{i}.{svc}:{port}" for i in range(sts["spec"]["replicas"])]


def test_the_inference_pool_selects_the_engine_pods_on_their_port() -> None:
    [pool] = by_kind("InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    sts = named("StatefulSet", "finserve-engine")
    assert pool["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    [engine] = sts["spec"]["template"]["spec"]["containers"]
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [int(option(engine["command"], "--port"))]
    assert pool["spec"]["endpointPickerRef"]["name"]
    [route] = by_kind("HTTPRoute")
    assert route["spec"]["rules"][0]["backendRefs"][0]["name"] == pool["metadata"]["name"]


def test_one_objective_per_class_in_the_policys_priority_order() -> None:
    policy = load_policy()
    objectives = by_kind("InferenceObjective")
    [pool] = by_kind("InferencePool")
    by_class = {o["metadata"]["annotations"]["finserve.io/workload-class"]: o for o in objectives}
    assert set(by_class) == set(policy.classes) and len(objectives) == len(policy.classes)
    for name, o in by_class.items():
        assert o["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2"
        assert o["metadata"]["name"] == name.replace("_", "-")  # the engine maps the header back
        assert o["spec"]["poolRef"]["name"] == pool["metadata"]["name"]
        assert (o["spec"]["priority"] < 0) == policy.get(name).preemptible  # sheddable = preemptible
    order = [c.name for c in policy.by_priority]
    assert sorted(by_class, key=lambda n: -by_class[n]["spec"]["priority"]) == order


def test_the_policy_configmap_is_the_packaged_policy() -> None:
    cm = named("ConfigMap", "finserve-policy")
    text = cm["data"]["policy.toml"]
    assert text == resources.files("policies").joinpath("default.toml").read_text(encoding="utf-8"), \
        "deploy/k8s/policy.yaml is out of date: copy policies/default.toml into its policy.toml"
    mounts = {m["mountPath"] for w in by_kind("StatefulSet") + by_kind("Deployment") for c in containers(w)
              for m in c.get("volumeMounts", []) if m["name"] == "policy"}
    policy_paths = {env(c).get("FINSERVE_POLICY") for w in by_kind("StatefulSet") + by_kind("Deployment")
                    for c in containers(w)} - {None}
    assert policy_paths == {f"{m}/policy.toml" for m in mounts}
    assert yaml.safe_load(yaml.safe_dump(cm))["data"]["policy.toml"] == text


CONFIGMAP_LIMIT = 1 << 20  # a ConfigMap's data may not exceed 1 MiB
LAST_APPLIED_LIMIT = 256 << 10  # client-side apply copies the object into an annotation of at most 256 KiB


def test_the_policy_configmap_fits_and_the_docs_apply_it_the_way_that_works() -> None:
    """Above 256 KiB `kubectl apply` (client-side) fails on its last-applied annotation; server-side apply
    keeps no such copy, so the documented command must be it."""
    size = len(named("ConfigMap", "finserve-policy")["data"]["policy.toml"].encode())
    assert size < CONFIGMAP_LIMIT
    deploy = (Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    if size > LAST_APPLIED_LIMIT:
        assert "kubectl apply --server-side -f deploy/k8s/" in deploy
