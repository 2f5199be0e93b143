"""The DLJob CRD on the real apiserver: malformed DLJobs are rejected naming the field.

Every case in ``tests/dljob_cases.py`` is sent to a real kube-apiserver (server-side dry run,
strict field validation — kubectl's default) and must fail with the field path in the message;
the same cases fail in ``parse_dljob`` (tests/unit/api), so both validators agree. Valid
objects and every manifest in ``examples/`` are accepted, defaulted, and read back by
``parse_dljob``; status goes through the status subresource and its printer columns show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dljob_cases import SHARED_CASES, STATUS_CASES, Case, valid_dljob
from horus.api.dljob import parse_dljob
from horus.common import constants as c

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NS = "dljob-crd-test"


@pytest.fixture(scope="module")
def crd(cluster: Any) -> Any:
    cluster.apply_crds(CRD, c.DLJOB_CRD_NAME)
    if cluster.kubectl("get", "namespace", NS, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", NS)
    return cluster


def _send(cluster: Any, obj: dict[str, Any], *args: str) -> Any:
    return cluster.kubectl(*args, "-n", NS, "-f", "-", input=json.dumps(obj), check=False)


def _dljob_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == c.DLJOB_KIND]


def test_crd_is_established_with_its_names(crd: Any) -> None:
    got = json.loads(crd.kubectl("get", "crd", c.DLJOB_CRD_NAME, "-o", "json").stdout)
    names = got["status"]["acceptedNames"]
    assert names["shortNames"] == [c.DLJOB_SHORT_NAME]
    assert "horus" in names["categories"]
    # The CRD's CEL rules compiled within the apiserver's cost budget (else no Established).
    conditions = {x["type"]: x["status"] for x in got["status"]["conditions"]}
    assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"
    assert crd.kubectl("get", c.DLJOB_SHORT_NAME, "-n", NS).returncode == 0


def test_at_least_fifteen_malformed_cases() -> None:
    assert len(SHARED_CASES) >= 15


@pytest.mark.parametrize("case", SHARED_CASES, ids=lambda k: k.id)
def test_apiserver_rejects_malformed_dljob(crd: Any, case: Case) -> None:
    proc = _send(crd, case.build(), "create", "--dry-run=server")
    assert proc.returncode != 0, f"{case.id} was accepted: {proc.stdout}"
    assert case.field in proc.stderr, proc.stderr
    assert case.api in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", STATUS_CASES, ids=lambda k: k.id)
def test_apiserver_rejects_malformed_status(crd: Any, case: Case) -> None:
    name = f"status-{case.id}"
    crd.kubectl("delete", "dljob", name, "-n", NS, "--ignore-not-found")
    assert _send(crd, valid_dljob(name), "create").returncode == 0
    status = case.build()["status"]
    proc = crd.kubectl(
        "patch", "dljob", name, "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=False,
    )  # fmt: skip
    assert proc.returncode != 0, f"{case.id} was accepted"
    assert case.field in proc.stderr, proc.stderr
    assert case.api in proc.stderr, proc.stderr


def test_valid_dljob_is_defaulted_and_parses_back(crd: Any) -> None:
    obj = valid_dljob("defaults")
    del obj["spec"]["replicas"], obj["spec"]["gpu"]
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "EPOCHS", "value": "3"}]
    obj["status"] = {"phase": "Succeeded"}  # ignored on create: status is a subresource
    crd.kubectl("delete", "dljob", "defaults", "-n", NS, "--ignore-not-found")
    proc = _send(crd, obj, "create")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(crd.kubectl("get", "dljob", "defaults", "-n", NS, "-o", "json").stdout)
    assert stored["spec"]["replicas"] == 1 and stored["spec"]["gpusPerReplica"] == 1
    assert stored["spec"]["gpu"] == {"mode": "auto"} and "priority" not in stored["spec"]
    # Pod fields the schema does not list are preserved, not pruned.
    assert stored["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "3"
    assert "status" not in stored or "phase" not in stored["status"]
    job = parse_dljob(stored)
    assert job.namespace == NS and job.generation == 1 and job.uid


def test_configmap_profile_gets_default_key(crd: Any) -> None:
    obj = valid_dljob("cm-profile")
    obj["spec"]["profile"] = {"configMapRef": {"name": "tiny-profile"}}
    proc = _send(crd, obj, "create", "--dry-run=server", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    assert stored["spec"]["profile"]["configMapRef"]["key"] == c.PROFILE_CONFIGMAP_DEFAULT_KEY


def test_status_subresource_and_printer_columns(crd: Any) -> None:
    name = "columns"
    crd.kubectl("delete", "dljob", name, "-n", NS, "--ignore-not-found")
    obj = valid_dljob(name)
    obj["spec"]["priorityClassName"] = "gold"
    assert _send(crd, obj, "create").returncode == 0
    status = {
        "phase": "Running",
        "reason": "Placed",
        "placements": [
            {"replica": 0, "pod": f"{name}-0", "node": "gpu-node-7", "gpuUUID": "GPU-x",
             "gpuIndex": 3, "corePercent": 40, "memoryMiB": 12288},
        ],
        "predicted": {"utilMean": 38.5, "utilUpper": 47.0, "memoryMiBMean": 9800.0,
                      "memoryMiBUpper": 11000.0, "modelVersion": "gbr-1"},
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Placed",
                        "message": "ok", "lastTransitionTime": "2024-05-01T12:00:00Z"}],
        "scheduledTime": "2024-05-01T12:00:00Z",
        "observed": {"util": 30.5, "pairs": [{"other": "bert@8", "gpuModel": "H100",
                                              "speed": 0.71, "samples": 12}]},
        "migrations": {"count": 2, "lastFrom": "gpu-node-1/gpu-0", "lastTo": "gpu-node-7/gpu-3",
                       "lastReason": "measured 0.41x next to bert@8", "lastTime": "2024-05-01T13:00:00Z"},
        "priority": 500,
    }  # fmt: skip
    crd.kubectl(
        "patch", "dljob", name, "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    # A spec update does not touch status, and a status write does not touch spec.
    out = crd.kubectl("get", "dlj", name, "-n", NS).stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    assert header == ["NAME", "PHASE", "NODE", "GPU", "CORE%", "MEM", "PREDUTIL", "AGE"]
    assert row[:7] == [name, "Running", "gpu-node-7", "3", "40", "12288", "38.5"]
    wide = crd.kubectl("get", "dlj", name, "-n", NS, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-6:] == ["REPLICAS", "QUEUE", "CLASS", "PRIORITY", "REASON", "MOVES"]
    assert wide[1].split()[-4:] == ["gold", "500", "Placed", "2"]
    stored = json.loads(crd.kubectl("get", "dlj", name, "-n", NS, "-o", "json").stdout)
    job = parse_dljob(stored)
    assert job.status.phase == "Running" and job.status.placements[0].gpu_index == 3
    assert job.status.predicted is not None and job.status.predicted.util_upper == 47.0
    assert job.status.observed is not None and job.status.migrations.count == 2
    assert [(x.other, x.gpu_model, x.speed, x.samples) for x in job.status.observed.pairs] == [
        ("bert@8", "H100", 0.71, 12)
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_accepted(crd: Any, path: Path) -> None:
    proc = crd.kubectl(
        "apply", "--dry-run=server", "-n", NS, "-f", str(path), "-o", "json", check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert _dljob_docs(path), f"{path.name} holds no DLJob"
    stored = json.loads(proc.stdout)
    items = stored.get("items", [stored])
    for item in items:
        if item["kind"] == c.DLJOB_KIND:
            parse_dljob(item)


def _deep_json(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_a_deeply_nested_template_is_refused_or_pruned_never_stored(crd: Any) -> None:
    """A pod template nested thousands of levels deep used to be stored as is (the template was
    x-kubernetes-preserve-unknown-fields) and stopped every Python client that listed DLJobs.
    With Kubernetes' PodSpec schema (tools/crdgen) kubectl's strict validation refuses the
    unknown field, and a client that does not ask for strict validation gets it pruned."""
    text = json.dumps(valid_dljob("deep-template"))
    marker = '"image": "python:3.12-slim"'
    assert marker in text
    evil = text.replace(marker, marker + ', "evil": ' + _deep_json(3000))
    crd.kubectl("delete", "dljob", "deep-template", "-n", NS, "--ignore-not-found")
    strict = crd.kubectl("create", "-n", NS, "-f", "-", input=evil, check=False)
    assert strict.returncode != 0 and "unknown field" in strict.stderr, strict.stderr
    lax = crd.kubectl("create", "--validate=false", "-n", NS, "-f", "-", input=evil, check=False)
    assert lax.returncode == 0, lax.stderr
    stored = crd.kubectl("get", "dljob", "deep-template", "-n", NS, "-o", "json").stdout
    obj = json.loads(stored)  # decodes: nothing deep was kept
    assert "evil" not in obj["spec"]["template"]["spec"]["containers"][0]
    assert parse_dljob(obj).name == "deep-template"


@pytest.mark.parametrize(
    ("container", "fragment"),
    [
        ({"resources": {"limits": {"memory": "lots"}}}, "resources.limits.memory"),
        ({"resources": {"requests": {"cpu": "1.5.5"}}}, "resources.requests.cpu"),
        ({"imagePullPolicy": 7}, "imagePullPolicy"),
        ({"ports": [{"containerPort": "http"}]}, "containerPort"),
    ],
)
def test_pod_fields_are_typed_by_the_schema(crd: Any, container: Any, fragment: str) -> None:
    """What the schema types (quantities, enums, ports) is refused at apply, before the
    operator ever sees the job; what only a Pod create checks is left to its dry run."""
    obj = valid_dljob("typed")
    obj["spec"]["template"]["spec"]["containers"][0].update(container)
    proc = _send(crd, obj, "create", "--dry-run=server")
    assert proc.returncode != 0, f"{container} was accepted"
    assert fragment in proc.stderr, proc.stderr
