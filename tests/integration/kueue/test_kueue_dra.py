"""What Kueue v0.19 (its default feature gates: KueueDRAIntegration on) does with pods that
use DRA. A pod template naming a ResourceClaimTemplate of a DeviceClass Kueue has no
``resources.deviceClassMappings`` entry for, or naming a ResourceClaim directly, leaves its
Workload without quota, inadmissible, with the reason in the QuotaReserved condition — the Job
stays suspended and no pod is made. A mapped DeviceClass is counted (devices per pod) as the
mapping's logical resource against the ClusterQueue's quota of it, and admitted."""

from __future__ import annotations

import uuid
from typing import Any

from kueue_support import KueueEnv, condition, job, wait_for

from horus.common import constants as c

MAPPED_CLASS = f"gpu-mapped.kueue-test.{c.API_GROUP}"
LOGICAL = f"kueue-test.{c.API_GROUP}/gpu"
KUEUE_CONFIG_OVERRIDES = {
    "resources": {"deviceClassMappings": [{"name": LOGICAL, "deviceClassNames": [MAPPED_CLASS]}]}
}


def _refused(env: KueueEnv, ns: str, name: str) -> dict[str, Any] | None:
    for wl in env.workloads(ns):
        owners = wl["metadata"].get("ownerReferences") or []
        if not any(o.get("kind") == "Job" and o.get("name") == name for o in owners):
            continue
        cond = condition(wl, "QuotaReserved")
        if cond and cond["status"] == "False" and cond.get("message"):
            return cond
    return None


def _claim_job(name: str, ns: str, queue: str, claim: dict[str, str]) -> dict[str, Any]:
    obj = job(name, ns, queue)
    spec = obj["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", **claim}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return obj


def test_pods_with_dra_claims_are_inadmissible_without_a_mapping(kueue: KueueEnv) -> None:
    ns = kueue.namespace("kdra")
    lq = kueue.queues(ns)
    device_class = f"gpu-{uuid.uuid4().hex[:6]}.kueue-test.{c.API_GROUP}"
    kueue.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": ns},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                    }
                }
            },
        },
    )
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    try:
        kueue.create(_claim_job("templated", ns, lq, {"resourceClaimTemplateName": "one-gpu"}))
        cond = wait_for(
            lambda: _refused(kueue, ns, "templated"), 60, "the templated Job refused", diag
        )
        assert f"DeviceClass {device_class} is not mapped in DRA configuration" in cond["message"]

        kueue.create(_claim_job("direct", ns, lq, {"resourceClaimName": "some-claim"}))
        cond = wait_for(lambda: _refused(kueue, ns, "direct"), 60, "the direct Job refused", diag)
        assert "does not support use of resource claims" in cond["message"], cond
        for name in ("templated", "direct"):
            assert kueue.get("job", name, ns)["spec"]["suspend"] is True
            assert not kueue.list("pods", ns, f"job-name={name}")
    finally:
        kueue.kubectl("delete", "deviceclass", device_class, check=False)


def test_a_mapped_device_class_counts_against_quota(kueue: KueueEnv) -> None:
    ns = kueue.namespace("kdram")
    lq = kueue.queues(ns, extra_quota={LOGICAL: "4"})
    kueue.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": MAPPED_CLASS},
            "spec": {},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-gpus", "namespace": ns},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": MAPPED_CLASS, "count": 2},
                            }
                        ]
                    }
                }
            },
        },
    )
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    try:
        kueue.create(_claim_job("mapped", ns, lq, {"resourceClaimTemplateName": "two-gpus"}))

        def admitted() -> dict[str, Any] | None:
            for wl in kueue.workloads(ns):
                cond = condition(wl, "Admitted")
                if cond and cond["status"] == "True":
                    return wl
            return None

        wl = wait_for(admitted, 60, "the mapped Job admitted", diag)
        [assignment] = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"][LOGICAL] == "2", assignment
    finally:
        kueue.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)
        kueue.kubectl("delete", "deviceclass", MAPPED_CLASS, check=False)
