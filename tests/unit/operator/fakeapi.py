"""An in-memory apiserver behind :class:`horus.operator.jobapi.JobApi`, for reconcile passes in
unit tests.

It stands in for what the operator's pass needs of a real apiserver: resourceVersions that
make a stale status write a ``Conflict``, JSON merge patches (``None`` deletes), pods that
exist once per name, Bindings that set ``spec.nodeName`` once, a dry run that refuses what the
apiserver's Pod validation would (a container name that is not a DNS label, an unknown
PriorityClass), and Events. The integration tests run the same pass on the real apiserver.
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from horus.kube.errors import Conflict
from horus.operator.jobapi import PodRejected, ProfileUnavailable

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeJobApi:
    """A :class:`JobApi` over dicts (see the module docstring)."""

    def __init__(self, nodes: list[dict[str, Any]] | None = None) -> None:
        self.lock = threading.Lock()
        self._rv = itertools.count(1)
        self.nodes = list(nodes or [])
        self.dljobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        #: ResourceClaims (the DRA path); their ``status.allocation`` is written by tests, as
        #: the kube-scheduler would (:meth:`allocate`)
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        #: ResourceSlices (the DRA path's GPU inventory)
        self.slices: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        #: PriorityClass name → value (``globalDefault`` in :attr:`default_class`)
        self.priority_classes: dict[str, int] = {}
        self.default_class: str | None = None
        #: classes a ResourceQuota scope refuses in every namespace (the quota admission's 403)
        self.quota_refuses: set[str] = set()
        #: classes with preemptionPolicy Never
        self.never_preempt: set[str] = set()
        self.dry_runs = 0
        #: dry runs asked for, refused ones included (:attr:`dry_runs` counts those that pass)
        self.dry_run_attempts = 0
        self.status_writes = 0
        #: every write that reached this apiserver, by kind (``status``, ``pod``, ``binding``,
        #: ``event``, ``claim``, ``delete``): what a job costs the apiserver in requests
        self.writes: Counter[str] = Counter()
        #: pod names whose create fails once with this exception (a crash between writes)
        self.fail_create_once: dict[str, Exception] = {}
        #: deleted pods stay (with a deletionTimestamp) until :meth:`finish_deletions`, as
        #: pods in their termination grace period do
        self.graceful = False
        #: per listing: key → (a private copy, the dict handed out) of the last listing
        self._handed: dict[str, dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]]] = {}

    # --- test helpers ------------------------------------------------------------------
    def add_dljob(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.dljobs[(meta["namespace"], meta["name"])] = obj
        return obj

    def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.dljobs[(namespace, name)]

    def run_bound_pods(self, phase: str = "Running") -> None:
        """What kubelets do: bound pods start (or end with ``phase``)."""
        for pod in self.pods.values():
            if pod["spec"].get("nodeName") and pod["status"].get("phase") != phase:
                pod["status"]["phase"] = phase
                pod["metadata"]["resourceVersion"] = str(next(self._rv))

    # --- JobApi ------------------------------------------------------------------------
    def list_pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return self._as_view("pods", self.pods)

    def list_dljobs(self) -> list[dict[str, Any]]:
        with self.lock:
            return self._as_view("dljobs", self.dljobs)

    def _as_view(self, kind: str, stored: Mapping[tuple[str, str], Any]) -> list[dict[str, Any]]:
        """The listing as the operator's watch-fed view hands it out: an object that did not
        change since the last listing is the very dict handed out then (the kept live state
        knows unchanged objects by identity), a changed one a new dict. The tests edit the
        stored objects in place, so what was handed out is compared with a private copy; a
        handed-out dict the operator edited fails here — it must treat them as read-only,
        for the real view shares them with every reader."""
        held = self._handed.setdefault(kind, {})
        out: list[dict[str, Any]] = []
        now: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
        for key, obj in stored.items():
            was = held.get(key)
            if was is not None:
                private, handed = was
                assert handed == private, f"the operator edited a listed {kind} object {key}"
                if private == obj:
                    now[key] = was
                    out.append(handed)
                    continue
            now[key] = (copy.deepcopy(obj), copy.deepcopy(obj))
            out.append(now[key][1])
        self._handed[kind] = now
        return out

    def list_nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.nodes)

    def patch_dljob_status(
        self, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        with self.lock:
            obj = self.dljobs.get((namespace, name))
            if obj is None:
                raise Conflict(f"DLJob {namespace}/{name} vanished")
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != obj["metadata"]["resourceVersion"]:
                raise Conflict(f"DLJob {namespace}/{name} changed")
            merge_patch(obj.setdefault("status", {}), body.get("status") or {})
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.status_writes += 1
            self.writes["status"] += 1
            return copy.deepcopy(obj)

    def create_pod(
        self, namespace: str, manifest: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any] | None:
        spec = manifest.get("spec") or {}
        self.dry_run_attempts += dry_run
        for container in spec.get("containers") or []:
            if not _DNS_LABEL.match(str(container.get("name", ""))):
                raise PodRejected(
                    422, f"spec.containers[0].name: Invalid value: {container.get('name')!r}"
                )
        prio = spec.get("priorityClassName")
        if prio and prio not in self.priority_classes:
            raise PodRejected(403, f"no PriorityClass with name {prio} was found")
        if (prio or self.default_class) in self.quota_refuses:
            raise PodRejected(
                403, "exceeded quota: by-class, requested: pods=1, used: pods=0, limited: pods=0"
            )
        if dry_run:
            self.dry_runs += 1
            return copy.deepcopy(dict(manifest))
        name = str(manifest["metadata"]["name"])
        failure = self.fail_create_once.pop(name, None)
        if failure is not None:
            raise failure
        with self.lock:
            self.writes["pod"] += 1
            if (namespace, name) in self.pods:
                return None
            pod = copy.deepcopy(dict(manifest))
            pod["metadata"]["uid"] = f"pod-uid-{name}"
            pod["metadata"]["resourceVersion"] = str(next(self._rv))
            pod["status"] = {"phase": "Pending"}
            self.pods[(namespace, name)] = pod
            return copy.deepcopy(pod)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self.pods.get((namespace, name))
            return copy.deepcopy(pod) if pod is not None else None

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        uid: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        with self.lock:
            self.writes["binding"] += 1
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise Conflict(f"pod {namespace}/{name} vanished before binding")
            if pod["spec"].get("nodeName"):
                return False
            if uid and pod["metadata"].get("uid") != uid:
                return False  # the apiserver's UID precondition: 409
            pod["spec"]["nodeName"] = node
            if annotations:  # as the apiserver copies a Binding's annotations onto the pod
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            pod["metadata"]["resourceVersion"] = str(next(self._rv))
            return True

    def record_pod_claims(
        self,
        namespace: str,
        name: str,
        uid: str,
        expected: Sequence[Mapping[str, Any]] | None,
        statuses: Sequence[Mapping[str, Any]],
    ) -> None:
        """As the apiserver applies the JSON patch: UID and list tested first."""
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None or pod["metadata"].get("uid") != uid:
                raise Conflict(f"pod {namespace}/{name} is gone")
            status = pod.setdefault("status", {})
            if expected is not None and status.get("resourceClaimStatuses") != list(expected):
                raise Conflict(f"pod {namespace}/{name}: its claim statuses changed")
            status["resourceClaimStatuses"] = [dict(s) for s in statuses]
            pod["metadata"]["resourceVersion"] = str(next(self._rv))
            self.writes["pod_status"] += 1

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        with self.lock:
            self.writes["delete"] += 1
            pod = self.pods.get((namespace, name))
            if pod is not None and uid and pod["metadata"].get("uid") != uid:
                return  # the apiserver's UID precondition: 409, nothing deleted
            if not self.graceful:
                self.pods.pop((namespace, name), None)
            elif (namespace, name) in self.pods:
                meta = self.pods[(namespace, name)]["metadata"]
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                meta["resourceVersion"] = str(next(self._rv))

    def finish_deletions(self) -> None:
        """The terminating pods' containers have stopped: they are gone."""
        with self.lock:
            for key in [k for k, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]:
                del self.pods[key]

    def list_priority_classes(self) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": n},
                "value": v,
                "globalDefault": n == self.default_class,
                "preemptionPolicy": "Never" if n in self.never_preempt else "PreemptLowerPriority",
            }
            for n, v in self.priority_classes.items()
        ]

    # --- ResourceClaims (the DRA path) ---------------------------------------------------
    def list_resource_claims(self) -> list[dict[str, Any]]:
        with self.lock:
            return self._as_view("claims", self.claims)

    def list_resource_slices(self) -> list[dict[str, Any]]:
        with self.lock:  # keyed by place: a test may replace the whole list
            return self._as_view("slices", {("", str(i)): s for i, s in enumerate(self.slices)})

    def create_resource_claim(
        self, namespace: str, manifest: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        with self.lock:
            self.writes["claim"] += 1
            name = str(manifest["metadata"]["name"])
            if (namespace, name) in self.claims:
                return None
            claim = copy.deepcopy(dict(manifest))
            claim["metadata"]["namespace"] = namespace
            claim["metadata"]["uid"] = f"claim-uid-{name}-{next(self._rv)}"
            claim["metadata"]["resourceVersion"] = str(next(self._rv))
            claim["status"] = {}
            self.claims[(namespace, name)] = claim
            return copy.deepcopy(claim)

    def read_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            claim = self.claims.get((namespace, name))
            return copy.deepcopy(claim) if claim is not None else None

    def delete_resource_claim(self, namespace: str, name: str, uid: str = "") -> None:
        with self.lock:
            self.writes["delete"] += 1
            claim = self.claims.get((namespace, name))
            if claim is not None and uid and claim["metadata"].get("uid") != uid:
                return  # the UID precondition: 409, nothing deleted
            self.claims.pop((namespace, name), None)

    def allocate(
        self,
        namespace: str,
        name: str,
        node: str,
        index: int,
        cores: int,
        mib: int,
        pod: str | None = None,
    ) -> None:
        """What the kube-scheduler writes when it allocates a claim (one device), and binds
        the pod ``pod`` that uses it."""
        with self.lock:
            claim = self.claims[(namespace, name)]
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.horus.io",
                                "pool": node,
                                "device": f"gpu-{index}",
                                "shareID": f"share-{name}",
                                "consumedCapacity": {"cores": str(cores), "memory": f"{mib}Mi"},
                            }
                        ]
                    }
                },
                "reservedFor": [
                    {
                        "resource": "pods",
                        "name": pod or "",
                        "uid": (self.pods.get((namespace, pod or "")) or {})
                        .get("metadata", {})
                        .get("uid", ""),
                    }
                ],
            }
            if pod is not None and (namespace, pod) in self.pods:
                self.pods[(namespace, pod)]["spec"]["nodeName"] = node

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        data = self.configmaps.get((namespace, name))
        if data is None:
            raise ProfileUnavailable(f"ConfigMap {namespace}/{name} does not exist")
        return dict(data)

    def post_event(self, body: Mapping[str, Any]) -> None:
        with self.lock:
            self.writes["event"] += 1
            self.events.append(copy.deepcopy(dict(body)))

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events if e["involvedObject"]["name"] == name]
