"""The DLJob custom resource as typed values: its spec and ``parse_dljob`` (the status types
live in :mod:`horus.api.jobstatus` and are re-exported here).

``manifests/crds/horus.io_dljobs.yaml`` makes the apiserver reject malformed DLJobs; this module
repeats its key checks so the operator, the simulator and unit tests see the *same* errors,
with the same field paths, without a cluster — and adds what a schema cannot say (container
names unique, no container asking for GPU resources itself, no Horus-owned labels or
annotations in the template, finite feature values). Errors are
:class:`~horus.common.errors.ValidationError` naming the field path, e.g.
``spec.gpu.corePercent: must be 1..100, got 150``.

The operator reads a DLJob with :func:`parse_dljob`, resolves a ``configMapRef`` profile with
:func:`parse_profile_document` (one validator for every profile, :mod:`horus.api.profile`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from horus.api._fields import (
    read_int,
    read_str,
    reject_unknown,
    require_object,
    type_name,
)
from horus.api.jobstatus import (
    DLJobStatus,
    JobCondition,
    ObservedUsage,
    PlacementRecord,
    format_time,
    parse_dljob_status,
)
from horus.api.profile import (
    PROFILE_KEYS,
    InlineProfile,
    parse_profile_document,
    parse_profile_mapping,
)
from horus.common.constants import (
    ANNOTATION_ASSIGNMENT_SIGNATURE,
    ANNOTATION_GPU_ALLOCATED,
    ANNOTATION_GPU_ASSIGNMENT,
    ANNOTATION_PREDICTED,
    API_GROUP_VERSION,
    DEFAULT_QUEUE,
    DLJOB_KIND,
    DLJOB_MAX_NAME_LENGTH,
    GPU_CORE_UNITS_PER_GPU,
    GPU_MODE_AUTO,
    GPU_MODE_EXPLICIT,
    GPU_MODES,
    LABEL_DLJOB_NAME,
    LABEL_REPLICA_INDEX,
    MAX_DLJOB_REPLICAS,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS_PER_REPLICA,
    MIGRATION_NEVER,
    MIGRATION_ON_CHECKPOINT,
    MIGRATION_POLICIES,
    PROFILE_CONFIGMAP_DEFAULT_KEY,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_NVIDIA_GPU,
    SCHEDULER_NAME,
)
from horus.common.errors import ValidationError

__all__ = [
    "ConfigMapProfileRef",
    "DLJob",
    "DLJobSpec",
    "DLJobStatus",
    "GpuRequest",
    "InlineProfile",
    "JobCondition",
    "MigrationSpec",
    "ObservedUsage",
    "PlacementRecord",
    "ProfileSource",
    "format_time",
    "parse_dljob",
    "parse_dljob_spec",
    "parse_dljob_status",
    "parse_profile_document",
]

# The same patterns as the CRD (Kubernetes' DNS-1123 label/subdomain, ConfigMap key, feature).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_MAX_CONTAINERS = 32
_RESTART_POLICIES = ("Never", "OnFailure")
_DEFAULT_RESTART_POLICY = "Never"
# GPU resources Horus sets on the pods itself; a container naming them would double-count.
_OWNED_RESOURCES = (RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_NVIDIA_GPU)
_OWNED_LABELS = (LABEL_DLJOB_NAME, LABEL_REPLICA_INDEX)
# (= HORUS_OWNED_POD_ANNOTATIONS: the operator copies the template's annotations onto the pods,
# and is exempt from the admission policy that refuses them to everyone else)
_OWNED_ANNOTATIONS = (
    ANNOTATION_GPU_ASSIGNMENT,
    ANNOTATION_ASSIGNMENT_SIGNATURE,
    ANNOTATION_PREDICTED,
    ANNOTATION_GPU_ALLOCATED,
)


# --- spec -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigMapProfileRef:
    """A profile document (`horus profile` output) stored under ``key`` of ConfigMap ``name`` in the job's namespace."""

    name: str
    key: str = PROFILE_CONFIGMAP_DEFAULT_KEY


ProfileSource = InlineProfile | ConfigMapProfileRef


@dataclass(frozen=True)
class GpuRequest:
    """The share of each GPU a replica asks for: sized by Horus (auto) or given explicitly."""

    mode: str = GPU_MODE_AUTO
    core_percent: int | None = None  # 1..100, only with mode explicit
    memory_mib: int | None = None  # 1..MAX_GPU_MEMORY_MIB, only with mode explicit

    @property
    def explicit(self) -> bool:
        return self.mode == GPU_MODE_EXPLICIT


@dataclass(frozen=True)
class MigrationSpec:
    """Whether Horus may move the running job, or preempt it for a higher-priority one.

    ``Never`` (the default): a move restarts the job's processes, and a job that does not
    write a checkpoint when told to would lose its progress, so moving is opted into.
    ``OnCheckpoint``: the job's pods get SIGTERM and ``grace_period_seconds`` to write a
    checkpoint under ``checkpoint_path`` (``$HORUS_CHECKPOINT_PATH``), and resume from it.
    """

    policy: str = MIGRATION_NEVER
    checkpoint_path: str | None = None
    grace_period_seconds: int = 30
    #: At most this many moves (None: the operator's limit).
    max_migrations: int | None = None

    @property
    def movable(self) -> bool:
        return self.policy == MIGRATION_ON_CHECKPOINT


@dataclass(frozen=True)
class DLJobSpec:
    """What the user asked for. ``template`` is the raw core/v1 PodTemplateSpec."""

    template: Mapping[str, Any]
    profile: ProfileSource
    replicas: int = 1
    gpus_per_replica: int = 1
    gpu: GpuRequest = field(default_factory=GpuRequest)
    #: A PriorityClass (scheduling.k8s.io/v1) whose value the operator resolves; None: the
    #: cluster's globalDefault class, else 0 — what the apiserver gives a pod without one.
    priority_class_name: str | None = None
    queue: str = DEFAULT_QUEUE
    migration: MigrationSpec = field(default_factory=MigrationSpec)

    @property
    def restart_policy(self) -> str:
        """The pods' restartPolicy: the template's, or Never (a job's pods must end)."""
        spec = self.template.get("spec", {})
        policy = spec.get("restartPolicy") if isinstance(spec, dict) else None
        return policy if isinstance(policy, str) else _DEFAULT_RESTART_POLICY


@dataclass(frozen=True)
class DLJob:
    """One DLJob object: identity, spec and status."""

    name: str
    namespace: str
    spec: DLJobSpec
    status: DLJobStatus = field(default_factory=DLJobStatus)
    uid: str = ""
    generation: int = 0
    resource_version: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``, the job's identity in queues, logs and events."""
        return f"{self.namespace}/{self.name}"


# --- parsing ----------------------------------------------------------------------------------


def parse_dljob(obj: Mapping[str, Any]) -> DLJob:
    """Validate a DLJob object (as the apiserver or kopf hands it over) and type it.

    Raises :class:`ValidationError` naming the field path of the first problem found.
    """
    raw = require_object(dict(obj), "DLJob")
    api_version, kind = raw.get("apiVersion"), raw.get("kind")
    if api_version is not None and api_version != API_GROUP_VERSION:
        raise ValidationError(f"apiVersion: must be {API_GROUP_VERSION}, got {api_version!r}")
    if kind is not None and kind != DLJOB_KIND:
        raise ValidationError(f"kind: must be {DLJOB_KIND}, got {kind!r}")
    unknown = sorted(set(raw) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        raise ValidationError(f"{', '.join(unknown)}: unknown top-level field(s)")
    meta = require_object(raw.get("metadata", {}), "metadata")
    name = read_str(meta, "name", "metadata", max_length=253)
    if len(name) > DLJOB_MAX_NAME_LENGTH:
        raise ValidationError(
            f"metadata.name: must be at most {DLJOB_MAX_NAME_LENGTH} characters (it becomes "
            f"the {LABEL_DLJOB_NAME} label of the job's pods), got {len(name)}"
        )
    if not _DNS_SUBDOMAIN.match(name):
        raise ValidationError(
            f"metadata.name: must be a DNS-1123 subdomain (lower-case letters, digits, '-', "
            f"'.'), got {name!r}"
        )
    namespace = read_str(meta, "namespace", "metadata", max_length=63, default="default")
    generation = read_int(meta, "generation", "metadata", lo=0, default=0)
    if "spec" not in raw:
        raise ValidationError("spec: required")
    spec = parse_dljob_spec(raw["spec"])
    status_raw = raw.get("status")
    status = DLJobStatus() if status_raw is None else parse_dljob_status(status_raw)
    return DLJob(
        name=name,
        namespace=namespace,
        spec=spec,
        status=status,
        uid=str(meta.get("uid", "")),
        generation=generation,
        resource_version=str(meta.get("resourceVersion", "")),
    )


_SPEC_KEYS = (
    "template",
    "replicas",
    "gpusPerReplica",
    "profile",
    "gpu",
    "priorityClassName",
    "priority",  # refused unless 0 (below)
    "queue",
    "migration",
)


def parse_dljob_spec(value: object, path: str = "spec") -> DLJobSpec:
    """Validate and type a DLJob ``spec`` (defaults as the CRD applies them)."""
    raw = require_object(value, path)
    reject_unknown(raw, _SPEC_KEYS, path)
    if "template" not in raw:
        raise ValidationError(f"{path}.template: required (the pod template of each replica)")
    template = _parse_template(raw["template"], f"{path}.template")
    replicas = read_int(raw, "replicas", path, lo=1, hi=MAX_DLJOB_REPLICAS, default=1)
    gpus = read_int(raw, "gpusPerReplica", path, lo=1, hi=MAX_GPUS_PER_REPLICA, default=1)
    if "profile" not in raw:
        raise ValidationError(
            f"{path}.profile: required (paste `horus profile` output, or use configMapRef)"
        )
    profile = _parse_profile(raw["profile"], f"{path}.profile")
    gpu = _parse_gpu(raw.get("gpu", {"mode": GPU_MODE_AUTO}), f"{path}.gpu")
    priority_class = _parse_priority_class(raw, path)
    queue = read_str(raw, "queue", path, max_length=63, default=DEFAULT_QUEUE)
    if not _DNS_LABEL.match(queue):
        raise ValidationError(
            f"{path}.queue: must be a DNS-1123 label (lower-case letters, digits, '-'), "
            f"got {queue!r}"
        )
    migration = _parse_migration(raw.get("migration", {}), f"{path}.migration")
    return DLJobSpec(
        migration=migration,
        template=template,
        profile=profile,
        replicas=replicas,
        gpus_per_replica=gpus,
        gpu=gpu,
        priority_class_name=priority_class,
        queue=queue,
    )


def _parse_priority_class(raw: dict[str, Any], path: str) -> str | None:
    """``priorityClassName``, and the old ``priority`` refused: a number in the
    spec let anyone who may create a DLJob jump every other tenant's jobs; a PriorityClass is
    the cluster admin's, and a ResourceQuota scope limits which classes a namespace may use.
    ``priority: 0`` passes unread: the old CRD's default, stored on every DLJob created before."""
    old = raw.get("priority", 0)
    if isinstance(old, bool) or old != 0:
        raise ValidationError(
            f"{path}.priority: no longer supported: name a PriorityClass in "
            f"{path}.priorityClassName (its value orders the queue and decides preemption, and "
            f"the namespace's ResourceQuota limits which classes it may use), got "
            f"{old!r}"
        )
    if "priorityClassName" not in raw:
        return None
    name = read_str(raw, "priorityClassName", path, max_length=253)
    if not _DNS_SUBDOMAIN.match(name):
        raise ValidationError(
            f"{path}.priorityClassName: must be a DNS-1123 subdomain (a PriorityClass name), "
            f"got {name!r}"
        )
    return name


def _parse_template(value: object, path: str) -> dict[str, Any]:
    template = require_object(value, path)
    reject_unknown(template, ("metadata", "spec"), path)
    meta = require_object(template.get("metadata", {}), f"{path}.metadata")
    for kind, owned in (("labels", _OWNED_LABELS), ("annotations", _OWNED_ANNOTATIONS)):
        entries = require_object(meta.get(kind, {}), f"{path}.metadata.{kind}")
        for key, val in entries.items():
            if not isinstance(val, str):
                raise ValidationError(
                    f"{path}.metadata.{kind}.{key}: must be a string, got {type_name(val)} {val!r}"
                )
            if key in owned:
                raise ValidationError(
                    f"{path}.metadata.{kind}.{key}: is set by Horus; remove it from the template"
                )
    if "spec" not in template:
        raise ValidationError(f"{path}.spec: required")
    spec = require_object(template["spec"], f"{path}.spec")
    spath = f"{path}.spec"
    if "nodeName" in spec:
        raise ValidationError(f"{spath}.nodeName: must not be set: Horus chooses the node")
    if "schedulerName" in spec and spec["schedulerName"] != SCHEDULER_NAME:
        raise ValidationError(
            f"{spath}.schedulerName: must be empty or {SCHEDULER_NAME}: Horus places DLJob "
            f"pods itself, got {spec['schedulerName']!r}"
        )
    for key in ("priorityClassName", "priority"):
        if key in spec:
            raise ValidationError(
                f"{spath}.{key}: must not be set in the template: name the class in "
                "spec.priorityClassName (Horus resolves it and puts it on every replica pod)"
            )
    if "restartPolicy" in spec and spec["restartPolicy"] not in _RESTART_POLICIES:
        raise ValidationError(
            f"{spath}.restartPolicy: must be one of {', '.join(_RESTART_POLICIES)} (a job's "
            f"pods must end), got {spec['restartPolicy']!r}"
        )
    if "containers" not in spec:
        raise ValidationError(f"{spath}.containers: required")
    containers = spec["containers"]
    if not isinstance(containers, list):
        raise ValidationError(f"{spath}.containers: must be a list, got {type_name(containers)}")
    if not 1 <= len(containers) <= _MAX_CONTAINERS:
        raise ValidationError(
            f"{spath}.containers: must have 1..{_MAX_CONTAINERS} entries, got {len(containers)}"
        )
    seen: set[str] = set()
    for i, item in enumerate(containers):
        cpath = f"{spath}.containers[{i}]"
        container = require_object(item, cpath)
        cname = read_str(container, "name", cpath, max_length=63)
        read_str(container, "image", cpath, max_length=4096)
        if cname in seen:
            raise ValidationError(f"{cpath}.name: duplicate container name {cname!r}")
        seen.add(cname)
        _check_container_resources(container, cpath)
    # An init container's requests count too (the kubelet takes the larger of the biggest
    # init container and the sum of the containers): one asking for GPU resources would make
    # the pod's effective request exceed its assignment.
    inits = spec.get("initContainers", [])
    if not isinstance(inits, list) or len(inits) > _MAX_CONTAINERS:
        raise ValidationError(
            f"{spath}.initContainers: must be a list of at most {_MAX_CONTAINERS} entries"
        )
    for i, item in enumerate(inits):
        cpath = f"{spath}.initContainers[{i}]"
        _check_container_resources(require_object(item, cpath), cpath)
    if "ephemeralContainers" in spec:
        raise ValidationError(
            f"{spath}.ephemeralContainers: must not be set in a template (ephemeral containers "
            "are added to running pods)"
        )
    return template


def _check_container_resources(container: dict[str, Any], cpath: str) -> None:
    resources = require_object(container.get("resources", {}), f"{cpath}.resources")
    for kind in ("requests", "limits"):
        entries = require_object(resources.get(kind, {}), f"{cpath}.resources.{kind}")
        for name in _OWNED_RESOURCES:
            if name in entries:
                raise ValidationError(
                    f"{cpath}.resources.{kind}.{name}: must not be set: Horus requests GPU "
                    f"resources for each replica from spec.gpu"
                )


_PROFILE_INLINE_KEYS = PROFILE_KEYS
_PROFILE_KEYS = (*_PROFILE_INLINE_KEYS, "configMapRef")


def _parse_profile(value: object, path: str) -> ProfileSource:
    raw = require_object(value, path)
    reject_unknown(raw, _PROFILE_KEYS, path)
    has_features, has_ref = "features" in raw, "configMapRef" in raw
    if has_features and has_ref:
        raise ValidationError(
            f"{path}.configMapRef: set only one of features (inline profile) or configMapRef, "
            f"not both"
        )
    if has_ref:
        inline = sorted(k for k in _PROFILE_INLINE_KEYS if k in raw)
        if inline:
            raise ValidationError(
                f"{path}.configMapRef: with configMapRef the whole profile comes from the "
                f"ConfigMap: do not also set {', '.join(inline)}"
            )
        return _parse_configmap_ref(raw["configMapRef"], f"{path}.configMapRef")
    if not has_features:
        raise ValidationError(
            f"{path}: set one of features (inline profile from `horus profile`) or configMapRef"
        )
    return parse_profile_mapping(raw, path)


def _parse_configmap_ref(value: object, path: str) -> ConfigMapProfileRef:
    raw = require_object(value, path)
    reject_unknown(raw, ("name", "key"), path)
    name = read_str(raw, "name", path, max_length=253)
    if not _DNS_SUBDOMAIN.match(name):
        raise ValidationError(f"{path}.name: must be a DNS-1123 subdomain, got {name!r}")
    key = read_str(raw, "key", path, max_length=253, default=PROFILE_CONFIGMAP_DEFAULT_KEY)
    if not _CONFIGMAP_KEY.match(key):
        raise ValidationError(
            f"{path}.key: must consist of letters, digits, '-', '_' or '.', got {key!r}"
        )
    return ConfigMapProfileRef(name=name, key=key)


def _parse_migration(value: object, path: str) -> MigrationSpec:
    raw = require_object(value, path)
    reject_unknown(raw, ("policy", "checkpointPath", "gracePeriodSeconds", "maxMigrations"), path)
    policy = raw.get("policy", MIGRATION_NEVER)
    if policy not in MIGRATION_POLICIES:
        raise ValidationError(
            f"{path}.policy: must be one of {', '.join(MIGRATION_POLICIES)}, got {policy!r}"
        )
    ckpt = (
        read_str(raw, "checkpointPath", path, max_length=4096) if "checkpointPath" in raw else None
    )
    if ckpt is not None and not ckpt.startswith("/"):
        raise ValidationError(f"{path}.checkpointPath: must be an absolute path, got {ckpt!r}")
    if policy == MIGRATION_ON_CHECKPOINT and ckpt is None:
        raise ValidationError(
            f"{path}.checkpointPath: policy OnCheckpoint needs checkpointPath: where the job "
            "writes its checkpoint and finds it again"
        )
    return MigrationSpec(
        policy=str(policy),
        checkpoint_path=ckpt,
        grace_period_seconds=read_int(raw, "gracePeriodSeconds", path, lo=1, hi=3600, default=30),
        max_migrations=(
            read_int(raw, "maxMigrations", path, lo=0, hi=100) if "maxMigrations" in raw else None
        ),
    )


def _parse_gpu(value: object, path: str) -> GpuRequest:
    raw = require_object(value, path)
    reject_unknown(raw, ("mode", "corePercent", "memoryMiB"), path)
    mode = raw.get("mode", GPU_MODE_AUTO)
    if mode not in GPU_MODES:
        raise ValidationError(f"{path}.mode: must be one of {', '.join(GPU_MODES)}, got {mode!r}")
    core = (
        read_int(raw, "corePercent", path, lo=1, hi=GPU_CORE_UNITS_PER_GPU)
        if "corePercent" in raw
        else None
    )
    memory = (
        read_int(raw, "memoryMiB", path, lo=1, hi=MAX_GPU_MEMORY_MIB)
        if "memoryMiB" in raw
        else None
    )
    if mode == GPU_MODE_EXPLICIT:
        if core is None:
            raise ValidationError(f"{path}.corePercent: mode explicit needs corePercent (1..100)")
        if memory is None:
            raise ValidationError(f"{path}.memoryMiB: mode explicit needs memoryMiB")
    else:
        for key, given in (("corePercent", core), ("memoryMiB", memory)):
            if given is not None:
                raise ValidationError(
                    f"{path}.{key}: must not be set with mode auto (Horus sizes the share); "
                    f"use mode explicit"
                )
    return GpuRequest(mode=str(mode), core_percent=core, memory_mib=memory)
