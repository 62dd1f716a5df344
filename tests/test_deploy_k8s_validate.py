"""The Kubernetes manifests, validated offline against the API schemas (kubernetes-validate, strict:
unknown fields are errors), and what they promise about the pod's privileges and network."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

K8S_DIR = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
PORT = 8000
# the oldest Kubernetes the manifests are meant for, and the newest the validator knows
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def manifests() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        out += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return [(name, doc) for name, doc in out if doc["kind"] != "Kustomization"]


def of_kind(kind: str) -> list[dict]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "doc"), manifests(), ids=[f"{n}:{d['kind']}" for n, d in manifests()])
def test_every_manifest_is_valid_for_kubernetes(name, doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_misspelt_field():
    (policy,) = of_kind("NetworkPolicy")
    broken = {**policy, "spec": {**policy["spec"], "ingres": policy["spec"]["ingress"]}}
    del broken["spec"]["ingress"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_cpu_manifest():
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == {f for f in files if not f.startswith("gpu-")}
    assert "networkpolicy.yaml" in kustomization["resources"]


def test_pods_get_no_service_account_token():
    deployments = of_kind("Deployment")
    assert len(deployments) == 2
    for deploy in deployments:
        assert deploy["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, deploy["metadata"]["name"]


def test_the_network_policy_admits_the_service_port_only_and_no_egress():
    (policy,) = of_kind("NetworkPolicy")
    spec = policy["spec"]
    selector = spec["podSelector"]["matchLabels"]
    for deploy in of_kind("Deployment"):
        assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items(), deploy["metadata"]["name"]
        ports = deploy["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert [p["containerPort"] for p in ports] == [PORT]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert [[(p["protocol"], p["port"]) for p in rule["ports"]] for rule in spec["ingress"]] == [[("TCP", PORT)]]
    assert spec["egress"] == [], "the pod opens no connection, not even to DNS"
    for service in of_kind("Service"):
        assert [p["port"] for p in service["spec"]["ports"]] == [PORT]
