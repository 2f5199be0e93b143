"""parse_dljob types valid DLJobs and rejects malformed ones naming the field, like the CRD."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from dljob_cases import SHARED_CASES, STATUS_CASES, Case, valid_dljob
from horus.api.assignment import GpuAssignment, PredictedUsage
from horus.api.dljob import (
    ConfigMapProfileRef,
    DLJobStatus,
    InlineProfile,
    JobCondition,
    ObservedUsage,
    PlacementRecord,
    format_time,
    parse_dljob,
    parse_dljob_status,
    parse_profile_document,
)
from horus.common import constants as c
from horus.common.errors import ValidationError

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml"


def _error(obj: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        parse_dljob(obj)
    return str(info.value)


def test_valid_job_gets_defaults() -> None:
    obj = valid_dljob()
    del obj["spec"]["replicas"], obj["spec"]["gpu"]
    del obj["spec"]["template"]["spec"]["restartPolicy"]
    job = parse_dljob(obj)
    assert (job.name, job.namespace, job.key) == ("valid", "default", "default/valid")
    assert job.spec.replicas == 1 and job.spec.gpus_per_replica == 1
    assert job.spec.gpu.mode == c.GPU_MODE_AUTO and not job.spec.gpu.explicit
    assert job.spec.priority_class_name is None and job.spec.queue == c.DEFAULT_QUEUE
    assert job.spec.restart_policy == "Never"
    assert job.status == DLJobStatus()
    assert isinstance(job.spec.profile, InlineProfile)
    assert job.spec.profile.features["params"] == 1.0e6
    assert job.spec.template["spec"]["containers"][0]["image"] == "python:3.12-slim"


def test_explicit_share_and_configmap_profile() -> None:
    obj = valid_dljob()
    obj["metadata"].update(namespace="ml", uid="u-1", generation=3, resourceVersion="77")
    obj["spec"].update(
        replicas=4,
        gpusPerReplica=2,
        priorityClassName="research-low",
        priority=0,  # the old CRD's default, stored on every DLJob made before: ignored
        queue="research",
        gpu={"mode": "explicit", "corePercent": 30, "memoryMiB": 8192},
        profile={"configMapRef": {"name": "bert.profile"}},
    )
    job = parse_dljob(obj)
    assert (job.uid, job.generation, job.resource_version) == ("u-1", 3, "77")
    assert job.spec.gpu.explicit and (job.spec.gpu.core_percent, job.spec.gpu.memory_mib) == (
        30,
        8192,
    )
    assert job.spec.profile == ConfigMapProfileRef("bert.profile", c.PROFILE_CONFIGMAP_DEFAULT_KEY)
    assert (job.spec.replicas, job.spec.gpus_per_replica) == (4, 2)
    assert job.spec.priority_class_name == "research-low"
    assert job.spec.queue == "research"


@pytest.mark.parametrize("case", SHARED_CASES + STATUS_CASES, ids=lambda k: k.id)
def test_malformed_job_is_rejected_naming_the_field(case: Case) -> None:
    message = _error(case.build())
    assert case.field in message, message
    assert case.unit in message, message


# What the schema cannot say; only parse_dljob checks these.
@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "spec.template.spec.containers",
            [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}],
            "spec.template.spec.containers[1].name: duplicate container name 'a'",
        ),
        (
            "spec.template.spec.containers",
            [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu: must not be set",
        ),
        (
            "spec.template.spec.containers",
            [{"name": "a", "image": "x", "resources": {"requests": {c.RESOURCE_GPU_CORE: 50}}}],
            f"resources.requests.{c.RESOURCE_GPU_CORE}: must not be set",
        ),
        (
            "spec.template.metadata",
            {"labels": {c.LABEL_DLJOB_NAME: "other"}},
            f"spec.template.metadata.labels.{c.LABEL_DLJOB_NAME}: is set by Horus",
        ),
        (
            "spec.template.metadata",
            {"annotations": {c.ANNOTATION_GPU_ASSIGNMENT: "{}"}},
            f"spec.template.metadata.annotations.{c.ANNOTATION_GPU_ASSIGNMENT}: is set by Horus",
        ),
        (
            "spec.template.metadata",
            {"annotations": {c.ANNOTATION_ASSIGNMENT_SIGNATURE: "v1:00"}},
            f"annotations.{c.ANNOTATION_ASSIGNMENT_SIGNATURE}: is set by Horus",
        ),
        (  # a pre-marked pod would pass the bind gate and Allocate's candidate list (issue 24)
            "spec.template.metadata",
            {"annotations": {c.ANNOTATION_GPU_ALLOCATED: "{}"}},
            f"annotations.{c.ANNOTATION_GPU_ALLOCATED}: is set by Horus",
        ),
        (
            "spec.template.metadata",
            {"labels": {"tier": 3}},
            "spec.template.metadata.labels.tier: must be a string, got integer",
        ),
        (
            "spec.profile.features",
            {"nan": float("nan")},
            "spec.profile.features.nan: must be a finite",
        ),
        ("spec.profile.features", {}, "spec.profile.features: must have 1..256 entries, got 0"),
        (
            "spec.profile.features",
            {"x": True},
            "spec.profile.features.x: must be a number, got boolean",
        ),
        (
            "spec.template",
            {"spec": {"containers": [{"name": "a", "image": "x"}]}, "kind": "Pod"},
            "spec.template.kind: unknown field",
        ),
        ("spec.template", "pod.yaml", "spec.template: must be an object, got string"),
        (
            "spec.template.spec.containers",
            {"name": "a"},
            "spec.template.spec.containers: must be a list, got object",
        ),
        ("spec.profile", {"configMapRef": {"name": "p"}, "model": "m"}, "do not also set model"),
        (
            "spec.profile",
            {"configMapRef": {"name": "p", "key": "a/b"}},
            "spec.profile.configMapRef.key: must consist of",
        ),
        (
            "spec.profile",
            {"features": {"a": 1}, "batchSize": 2},
            "spec.profile.model: an inline profile needs model",
        ),
        (
            "spec.gpu",
            {"mode": "explicit", "corePercent": True, "memoryMiB": 1},
            "spec.gpu.corePercent: must be an integer, got boolean",
        ),
        ("metadata.name", "Bad_Name", "metadata.name: must be a DNS-1123 subdomain"),
        ("apiVersion", "horus.io/v1", "apiVersion: must be horus.io/v1alpha1"),
        ("kind", "Job", "kind: must be DLJob, got 'Job'"),
        ("extra", 1, "extra: unknown top-level field"),
    ],
)
def test_what_only_parse_dljob_checks(path: str, value: Any, message: str) -> None:
    obj = valid_dljob()
    keys = path.split(".")
    node = obj
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    assert message in _error(obj)


def test_missing_spec_and_metadata_name() -> None:
    obj = valid_dljob()
    del obj["spec"]
    assert _error(obj) == "spec: required"
    obj = valid_dljob()
    del obj["metadata"]["name"]
    assert _error(obj) == "metadata.name: required"


def test_whole_floats_from_json_are_integers() -> None:
    obj = valid_dljob()
    obj["spec"]["replicas"] = 2.0
    assert parse_dljob(obj).spec.replicas == 2


def test_status_round_trips_through_to_json() -> None:
    t0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    status = DLJobStatus(
        phase=c.DLJOB_PHASE_SCHEDULED,
        reason="Placed",
        message="2 replicas placed",
        observed_generation=1,
        placements=(
            PlacementRecord.from_assignment(
                GpuAssignment("n1", "GPU-a", 0, 40, 8192, job="valid", replica=0), 0, "valid-0"
            ),
            PlacementRecord(1, "n2", "GPU-b", 3, 40, 8192),
        ),
        predicted=PredictedUsage(38.0, 45.5, 7000.0, 7900.0, "gbr-1", low_confidence=True),
        observed=ObservedUsage(util=41.0, memory_mib=7100.0, sampled_at=t0),
        conditions=(JobCondition("Scheduled", "True", "Placed", "ok", t0, 1),),
        queued_time=t0,
        scheduled_time=t0,
    )
    raw = status.to_json()
    assert raw["placements"][0] == {
        "replica": 0,
        "pod": "valid-0",
        "node": "n1",
        "gpuUUID": "GPU-a",
        "gpuIndex": 0,
        "corePercent": 40,
        "memoryMiB": 8192,
    }
    assert raw["queuedTime"] == "2024-05-01T12:00:00Z"
    assert parse_dljob_status(copy.deepcopy(raw)) == status
    assert status.condition("Scheduled") is not None and status.condition("Running") is None
    obj = valid_dljob()
    obj["status"] = raw
    assert parse_dljob(obj).status == status


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"queuedTime": "yesterday"}, "status.queuedTime: must be an RFC 3339 time"),
        ({"startTime": "2024-05-01T12:00:00"}, "status.startTime: must carry a time zone"),
        ({"placements": {}}, "status.placements: must be a list, got object"),
        ({"placements": [{"replica": 0}]}, "status.placements[0].node: required"),
        ({"conditions": [{"type": "A", "status": "True"}] * 2}, "duplicate condition type"),
        (
            {"conditions": [{"type": "A", "status": "True", "reason": "no spaces"}]},
            "status.conditions[0].reason",
        ),
        (
            {
                "predicted": {
                    "utilMean": 50,
                    "utilUpper": 40,
                    "memoryMiBMean": 1,
                    "memoryMiBUpper": 1,
                    "modelVersion": "v",
                }
            },
            "status.predicted.utilUpper: must be >= utilMean (50), got 40",
        ),
        ({"observed": {"util": -1}}, "status.observed.util: must be 0..100, got -1"),
        ({"phase": "Running", "color": "red"}, "status.color: unknown field"),
    ],
)
def test_bad_status_is_rejected(status: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_dljob_status(status)
    assert message in str(info.value)


def test_format_time_needs_a_zone() -> None:
    with pytest.raises(ValidationError, match="no time zone"):
        format_time(datetime(2024, 1, 1))


def test_profile_document_round_trip() -> None:
    profile = InlineProfile("resnet50", 64, {"params": 2.5e7, "batch_size": 64}, 1, "resnet")
    doc = profile.to_document()
    assert doc["kind"] == c.GRAPH_PROFILE_KIND and doc["apiVersion"] == c.API_GROUP_VERSION
    assert parse_profile_document(yaml.safe_dump(doc)) == profile
    assert (
        parse_profile_document('{"model": "m", "batchSize": 1, "features": {"a": 1}}').model == "m"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: [", "cm: not valid JSON or YAML"),
        ("- 1", "cm: must be an object, got list"),
        ("kind: Pod\nmodel: m\nbatchSize: 1\nfeatures: {a: 1}", "cm.kind: must be GraphProfile"),
        ("model: m\nbatchSize: 1", "cm.features: required"),
        ("model: m\nfeatures: {a: 1}", "cm.batchSize: an inline profile needs batchSize"),
        ("model: m\nbatchSize: 1\nfeatures: {a: x}", "cm.features.a: must be a number"),
    ],
)
def test_bad_profile_document(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_profile_document(text, "cm")
    assert message in str(info.value)


def test_crd_limits_match_constants() -> None:
    """The CRD and horus.common.constants must not drift apart."""
    crd = yaml.safe_load(CRD.read_text())
    assert crd["metadata"]["name"] == c.DLJOB_CRD_NAME
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        c.DLJOB_KIND,
        c.DLJOB_PLURAL,
        c.DLJOB_SINGULAR,
    )
    assert names["shortNames"] == [c.DLJOB_SHORT_NAME]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == c.API_VERSION and "status" in version["subresources"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    spec, status = schema["spec"]["properties"], schema["status"]["properties"]
    assert spec["replicas"]["maximum"] == c.MAX_DLJOB_REPLICAS
    assert spec["gpusPerReplica"]["maximum"] == c.MAX_GPUS_PER_REPLICA
    assert spec["gpu"]["properties"]["memoryMiB"]["maximum"] == c.MAX_GPU_MEMORY_MIB
    assert spec["gpu"]["properties"]["corePercent"]["maximum"] == c.GPU_CORE_UNITS_PER_GPU
    assert spec["gpu"]["properties"]["mode"]["enum"] == list(c.GPU_MODES)
    assert spec["priorityClassName"]["maxLength"] == 253 and "default" not in spec["priority"]
    assert status["priority"]["format"] == "int32"
    assert spec["profile"]["properties"]["features"]["maxProperties"] == c.MAX_PROFILE_FEATURES
    ref = spec["profile"]["properties"]["configMapRef"]["properties"]
    assert ref["key"]["default"] == c.PROFILE_CONFIGMAP_DEFAULT_KEY
    assert status["phase"]["enum"] == list(c.DLJOB_PHASES)
    columns = [
        col["name"] for col in version["additionalPrinterColumns"] if not col.get("priority")
    ]
    assert columns == ["Phase", "Node", "GPU", "Core%", "Mem", "PredUtil", "Age"]
    template_spec = spec["template"]["properties"]["spec"]
    rules = " ".join(r["rule"] for r in template_spec["x-kubernetes-validations"])
    assert c.SCHEDULER_NAME in rules
