"""Malformed DLJobs shared by the unit tests (``parse_dljob``) and the CRD integration test.

Each case breaks one thing in an otherwise valid DLJob and names the field that both the
apiserver (via the CRD's OpenAPI schema and CEL rules) and ``horus.api.parse_dljob`` must
report, so the two validators are proven to agree on the same objects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def valid_dljob(name: str = "valid") -> Obj:
    """A small valid DLJob (auto GPU share, inline profile)."""
    return {
        "apiVersion": "horus.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "python:3.12-slim"}],
                },
            },
            "replicas": 1,
            "profile": {
                "model": "tiny",
                "family": "mlp",
                "batchSize": 32,
                "schemaVersion": 1,
                "features": {"batch_size": 32, "params": 1.0e6, "fwd_flops": 6.4e7},
            },
            "gpu": {"mode": "auto"},
        },
    }


@dataclass(frozen=True)
class Case:
    """One malformed DLJob: ``mutate`` breaks a valid one; ``field`` must be named in errors."""

    id: str
    mutate: Callable[[Obj], None]
    field: str  # the field path both validators must name
    unit: str  # a fragment of parse_dljob's message
    api: str = ""  # a fragment of the apiserver's message (besides the field)

    def build(self, name: str | None = None) -> Obj:
        obj = valid_dljob(name or f"bad-{self.id}")
        self.mutate(obj)
        return obj


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    keys = path.split(".")

    def mutate(obj: Obj) -> None:
        node = obj
        for k in keys[:-1]:
            node = node.setdefault(k, {}) if not k.isdigit() else node[int(k)]
        node[keys[-1]] = copy.deepcopy(value)

    return mutate


def _del(path: str) -> Callable[[Obj], None]:
    keys = path.split(".")

    def mutate(obj: Obj) -> None:
        node = obj
        for k in keys[:-1]:
            node = node[k] if not k.isdigit() else node[int(k)]
        del node[keys[-1]]

    return mutate


def _explicit(core: Any, memory: Any) -> Callable[[Obj], None]:
    return _set("spec.gpu", {"mode": "explicit", "corePercent": core, "memoryMiB": memory})


def _both_profiles(obj: Obj) -> None:
    obj["spec"]["profile"]["configMapRef"] = {"name": "tiny-profile"}


def _neither_profile(obj: Obj) -> None:
    del obj["spec"]["profile"]["features"]


# Cases the apiserver (CRD schema + CEL) and parse_dljob both reject.
SHARED_CASES: list[Case] = [
    Case(
        "replicas-string",
        _set("spec.replicas", "two"),
        "spec.replicas",
        "must be an integer",
        "integer",
    ),
    Case(
        "replicas-zero",
        _set("spec.replicas", 0),
        "spec.replicas",
        "must be 1..1024, got 0",
        "greater than or equal to 1",
    ),
    Case(
        "replicas-huge",
        _set("spec.replicas", 5000),
        "spec.replicas",
        "must be 1..1024",
        "less than or equal to 1024",
    ),
    Case(
        "gpus-per-replica-zero",
        _set("spec.gpusPerReplica", 0),
        "spec.gpusPerReplica",
        "must be 1..16",
        "greater than or equal to 1",
    ),
    Case(
        "core-negative",
        _explicit(-5, 4096),
        "spec.gpu.corePercent",
        "must be 1..100, got -5",
        "greater than or equal to 1",
    ),
    Case(
        "core-over-100",
        _explicit(150, 4096),
        "spec.gpu.corePercent",
        "must be 1..100, got 150",
        "less than or equal to 100",
    ),
    Case(
        "core-fraction",
        _explicit(40.5, 4096),
        "spec.gpu.corePercent",
        "must be an integer",
        "integer",
    ),
    Case(
        "core-string",
        _explicit("40%", 4096),
        "spec.gpu.corePercent",
        "must be an integer",
        "integer",
    ),
    Case(
        "memory-over-any-gpu",
        _explicit(50, 2_000_000),
        "spec.gpu.memoryMiB",
        "must be 1..1048576, got 2000000",
        "less than or equal to 1048576",
    ),
    Case(
        "memory-negative",
        _explicit(50, -1),
        "spec.gpu.memoryMiB",
        "must be 1..1048576, got -1",
        "greater than or equal to 1",
    ),
    Case(
        "gpu-mode-unknown",
        _set("spec.gpu", {"mode": "turbo"}),
        "spec.gpu.mode",
        "must be one of auto, explicit",
        "Unsupported value",
    ),
    Case(
        "explicit-without-memory",
        _set("spec.gpu", {"mode": "explicit", "corePercent": 50}),
        "spec.gpu.memoryMiB",
        "mode explicit needs memoryMiB",
    ),
    Case(
        "explicit-without-core",
        _set("spec.gpu", {"mode": "explicit", "memoryMiB": 4096}),
        "spec.gpu.corePercent",
        "mode explicit needs corePercent",
    ),
    Case(
        "auto-with-core",
        _set("spec.gpu", {"mode": "auto", "corePercent": 50}),
        "spec.gpu.corePercent",
        "must not be set with mode auto",
    ),
    Case("missing-template", _del("spec.template"), "spec.template", "required", "Required value"),
    Case(
        "template-without-containers",
        _set("spec.template.spec", {"restartPolicy": "Never"}),
        "spec.template.spec.containers",
        "required",
        "Required value",
    ),
    Case(
        "containers-empty",
        _set("spec.template.spec.containers", []),
        "spec.template.spec.containers",
        "must have 1..32 entries",
        "at least 1 items",
    ),
    Case(
        "container-without-image",
        _set("spec.template.spec.containers", [{"name": "trainer"}]),
        "spec.template.spec.containers[0].image",
        "required",
        "Required value",
    ),
    Case(
        "container-requests-gpu-core",
        _set(
            "spec.template.spec.containers",
            [{"name": "t", "image": "x", "resources": {"requests": {"horus.io/gpu-core": "50"}}}],
        ),
        "spec.template.spec.containers",
        "must not be set",
        "must not request horus.io/gpu-core",
    ),
    Case(
        "init-container-requests-gpu",
        _set(
            "spec.template.spec.initContainers",
            [{"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        ),
        "spec.template.spec.initContainers",
        "must not be set",
        "an init container would hold GPU resources",
    ),
    Case(
        "init-container-requests-gpu-memory",
        _set(
            "spec.template.spec.initContainers",
            [{"name": "i", "image": "x", "resources": {"requests": {"horus.io/gpu-memory": "8"}}}],
        ),
        "spec.template.spec.initContainers",
        "must not be set",
        "an init container would hold GPU resources",
    ),
    Case(
        "template-ephemeral-containers",
        _set("spec.template.spec.ephemeralContainers", [{"name": "e", "image": "x"}]),
        "spec.template.spec.ephemeralContainers",
        "must not be set in a template",
        "must not be set in a template",
    ),
    Case(
        "template-node-name",
        _set("spec.template.spec.nodeName", "gpu-node-1"),
        "spec.template.spec.nodeName",
        "must not be set",
    ),
    Case(
        "template-scheduler-name",
        _set("spec.template.spec.schedulerName", "default-scheduler"),
        "spec.template.spec.schedulerName",
        "must be empty or horus-scheduler",
    ),
    Case(
        "restart-always",
        _set("spec.template.spec.restartPolicy", "Always"),
        "spec.template.spec.restartPolicy",
        "must be one of Never, OnFailure",
        "Unsupported value",
    ),
    Case(
        "unknown-spec-field",
        _set("spec.gpuShare", 50),
        "spec.gpuShare",
        "unknown field",
        "unknown field",
    ),
    Case(
        "unknown-gpu-field",
        _set("spec.gpu.shares", 2),
        "spec.gpu.shares",
        "unknown field",
        "unknown field",
    ),
    Case("missing-profile", _del("spec.profile"), "spec.profile", "required", "Required value"),
    Case("both-profile-forms", _both_profiles, "spec.profile.configMapRef", "only one of features"),
    Case(
        "configmap-ref-with-inline-fields",
        _set("spec.profile", {"configMapRef": {"name": "p"}, "model": "m"}),
        "spec.profile.configMapRef",
        "do not also set model",
    ),
    Case("neither-profile-form", _neither_profile, "spec.profile", "set one of features"),
    Case(
        "inline-profile-without-batch",
        _del("spec.profile.batchSize"),
        "spec.profile.batchSize",
        "needs batchSize",
    ),
    Case(
        "feature-not-a-number",
        _set("spec.profile.features.params", "big"),
        "spec.profile.features.params",
        "must be a number",
        "number",
    ),
    Case(
        "feature-negative",
        _set("spec.profile.features.params", -2.5e7),
        "spec.profile.features.params",
        "must be a finite number >= 0",
        "greater than or equal to 0",
    ),
    Case(
        "profile-schema-version-unsupported",
        _set("spec.profile.schemaVersion", 2),
        "spec.profile.schemaVersion",
        "2 is not supported",
        "less than or equal to 1",
    ),
    Case(
        "feature-bad-name",
        _set("spec.profile.features", {"fwd flops": 1.0}),
        "spec.profile.features",
        "feature name 'fwd flops'",
    ),
    Case(
        "configmap-ref-bad-name",
        _set("spec.profile", {"configMapRef": {"name": "Bad Name"}}),
        "spec.profile.configMapRef.name",
        "DNS-1123 subdomain",
        "should match",
    ),
    Case(
        "priority-number-replaced-by-class",
        _set("spec.priority", 500),
        "spec.priority",
        "spec.priorityClassName",
        "spec.priorityClassName",
    ),
    Case(
        "priority-class-bad-name",
        _set("spec.priorityClassName", "Gold Tier"),
        "spec.priorityClassName",
        "DNS-1123 subdomain",
        "should match",
    ),
    Case(
        "template-priority-class",
        _set("spec.template.spec.priorityClassName", "gold"),
        "spec.template.spec.priorityClassName",
        "name the class in spec.priorityClassName",
        "name the class in spec.priorityClassName",
    ),
    Case(
        "template-priority",
        _set("spec.template.spec.priority", 1000),
        "spec.template.spec.priority",
        "name the class in spec.priorityClassName",
        "name the class in spec.priorityClassName",
    ),
    Case(
        "migration-policy-unknown",
        _set("spec.migration", {"policy": "Always"}),
        "spec.migration.policy",
        "must be one of Never, OnCheckpoint",
        "Unsupported value",
    ),
    Case(
        "migration-on-checkpoint-without-path",
        _set("spec.migration", {"policy": "OnCheckpoint"}),
        "spec.migration.checkpointPath",
        "needs checkpointPath",
        "needs checkpointPath",
    ),
    Case(
        "migration-relative-checkpoint-path",
        _set("spec.migration", {"policy": "OnCheckpoint", "checkpointPath": "ckpt/"}),
        "spec.migration.checkpointPath",
        "must be an absolute path",
        "should match",
    ),
    Case(
        "migration-grace-zero",
        _set("spec.migration", {"policy": "Never", "gracePeriodSeconds": 0}),
        "spec.migration.gracePeriodSeconds",
        "must be 1..3600",
        "greater than or equal to 1",
    ),
    Case(
        "migration-unknown-field",
        _set("spec.migration", {"policy": "Never", "when": "always"}),
        "spec.migration.when",
        "unknown field",
        "unknown field",
    ),
    Case(
        "queue-bad-name",
        _set("spec.queue", "Big_Queue"),
        "spec.queue",
        "DNS-1123 label",
        "should match",
    ),
    Case(
        "name-too-long", _set("metadata.name", "a" * 70), "metadata.name", "at most 63 characters"
    ),
]

# Status written through the status subresource: rejected by the apiserver and parse_dljob.
STATUS_CASES: list[Case] = [
    Case(
        "observed-pair-speed-over-1",
        _set(
            "status",
            {
                "observed": {
                    "pairs": [{"other": "bert@8", "gpuModel": "H100", "speed": 1.5, "samples": 4}]
                }
            },
        ),
        "status.observed.pairs[0].speed",
        "must be 0.05..1, got 1.5",
        "less than or equal to 1",
    ),
    Case(
        "bad-phase",
        _set("status", {"phase": "Exploded"}),
        "status.phase",
        "must be one of Pending",
        "Unsupported value",
    ),
    Case(
        "placement-core-over-100",
        _set(
            "status",
            {
                "phase": "Scheduled",
                "placements": [
                    {
                        "replica": 0,
                        "node": "n1",
                        "gpuUUID": "GPU-1",
                        "gpuIndex": 0,
                        "corePercent": 101,
                        "memoryMiB": 1024,
                    }
                ],
            },
        ),
        "status.placements[0].corePercent",
        "must be 1..100, got 101",
        "less than or equal to 100",
    ),
    Case(
        "predicted-util-over-100",
        _set(
            "status",
            {
                "predicted": {
                    "utilMean": 120,
                    "utilUpper": 130,
                    "memoryMiBMean": 1,
                    "memoryMiBUpper": 2,
                    "modelVersion": "v1",
                }
            },
        ),
        "status.predicted.utilMean",
        "must be 0..100, got 120",
        "less than or equal to 100",
    ),
    Case(
        "condition-bad-status",
        _set("status", {"conditions": [{"type": "Scheduled", "status": "Maybe"}]}),
        "status.conditions[0].status",
        "must be one of True",
        "Unsupported value",
    ),
]
