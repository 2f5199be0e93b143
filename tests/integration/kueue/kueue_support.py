"""Kueue (with JobSet and Kubeflow Trainer) on the session's control plane, for tests.

``KueueEnv`` (the ``kueue`` fixture of conftest.py) is the real Kueue v0.19, JobSet and Trainer
controllers running as host processes against the ``cluster`` fixture's apiserver, installed
from their own manifests by :class:`horus.devcluster.workload_controllers.WorkloadControllers`,
with one kwok node (``node``) that pods land on (kwok marks them Running). Helpers make a fresh
namespace and Kueue's queue objects; the object makers return plain dicts to apply.

Import it from a test module beside this file (``from kueue_support import KueueEnv``), or
use the ``kueue`` fixture.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from horus.common import constants as c

KUEUE_API = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
#: pods of the tests' workloads (kwok runs nothing; any image name does)
IMAGE = "registry.invalid/horus-test:1"


@dataclass
class KueueEnv:
    cluster: Any
    controllers: Any
    node: str
    namespaces: list[str] = field(default_factory=list)

    # --- kubectl -----------------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> Any:
        return self.cluster.kubectl(*args, check=check, input=input)

    def apply(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def create(self, obj: dict[str, Any]) -> None:
        self.kubectl("create", "-f", "-", input=json.dumps(obj))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = ["-n", namespace] if namespace else []
        out: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *ns, "-o", "json").stdout)
        return out

    def list(self, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        sel = ["-l", selector] if selector else []
        out = self.kubectl("get", kind, "-n", namespace, *sel, "-o", "json").stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def namespace(self, prefix: str = "kq") -> str:
        """A fresh namespace (deleted by the fixture), once its default ServiceAccount exists."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", name)
        self.namespaces.append(name)
        wait_for(
            lambda: self.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
            60,
            f"default ServiceAccount in {name}",
        )
        return name

    def diagnose(self, namespace: str) -> str:
        parts = [self.cluster.diagnose(namespace)]
        parts.append(
            self.kubectl("get", "workloads", "-n", namespace, "-o", "yaml", check=False).stdout[
                -4000:
            ]
        )
        for name, info in self.controllers.status()["controllers"].items():
            parts.append(f"--- {name}: {info}")
            try:
                with open(info["log"], errors="replace") as f:
                    parts.append("".join(f.readlines()[-30:]))
            except OSError:
                pass
        return "\n".join(parts)

    # --- Kueue's objects ----------------------------------------------------------------
    def queues(
        self,
        namespace: str,
        *,
        cpu: str = "64",
        admission_checks: list[str] | None = None,
        suffix: str | None = None,
        extra_quota: dict[str, str] | None = None,
    ) -> str:
        """A ResourceFlavor, a ClusterQueue with ``cpu`` CPU and memory quota (plus
        ``extra_quota``: resource name -> quota, and ``admission_checks``), and a LocalQueue in
        ``namespace`` pointing at it; returns the LocalQueue's name."""
        sfx = suffix or uuid.uuid4().hex[:6]
        flavor, cq, lq = f"flavor-{sfx}", f"cq-{sfx}", f"lq-{sfx}"
        self.apply(
            {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
        )
        quota = {"cpu": cpu, "memory": "256Gi", **(extra_quota or {})}
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()],
                        }
                    ],
                }
            ],
        }
        if admission_checks:
            spec["admissionChecksStrategy"] = {
                "admissionChecks": [{"name": n} for n in admission_checks]
            }
        self.apply(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": spec,
            },
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": namespace},
                "spec": {"clusterQueue": cq},
            },
        )
        return lq

    def admission_check(
        self, name: str, controller: str = c.KUEUE_ADMISSION_CHECK_CONTROLLER
    ) -> None:
        self.apply(
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {"controllerName": controller},
            }
        )

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        return self.list("workloads", namespace)


def pod_spec(cpu: str = "1") -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
            }
        ],
    }


def job(name: str, namespace: str, queue: str, parallelism: int = 1) -> dict[str, Any]:
    """A batch/v1 Job in ``queue``, created without ``suspend`` (Kueue's webhook sets it)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": pod_spec()},
        },
    }


def jobset(name: str, namespace: str, queue: str, pods: int = 4) -> dict[str, Any]:
    """A JobSet with one replicated Job of ``pods`` pods, in ``queue``."""
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec()},
                        }
                    },
                }
            ]
        },
    }


def wait_for(
    check: Callable[[], Any], timeout: float, what: str, diagnose: Callable[[], str] | None = None
) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            extra = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(0.3)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return None
