"""What each API write of a placement costs the control plane: CPU per request, by kind.

    .venv/bin/python benchmarks/apiserver_costs.py [--requests 300]

Why: ``benchmarks/operator_e2e.py`` is bound by CPU on a small machine, where the apiserver,
etcd, kwok, the operator and the benchmark's client share the cores. This measures, on its own
local control plane (``horus.devcluster``, 50 kwok GPU nodes, no operator running), the CPU
seconds kube-apiserver and etcd spend per request for each write Horus makes for one job —
DLJob create (the user's), DLJob status merge patch (the operator's placement record, later
its Running status), pod create, Binding — with the stock scheduler's writes (pod create,
Binding, Event) among them as the baseline, all in the same run. Requests go out from 16
client threads, as in the end-to-end benchmark; an idle window of the same length is
measured too and subtracted. A probe: the same DLJob create and status patch on a copy of the
CRD whose pod template is not validated (``lite_crd``), to tell what the template's schema —
Kubernetes' full PodSpec, most of the CRD — costs each write; and (issue 27, third round) a
custom resource with no schema, with a tiny body and with a whole DLJob's body (``tiny_crd``:
what any custom resource's write costs, and what the body's size adds), the DLJob CRD with
its profile's features one atomic field (``atomic_crd``), and a pod status merge patch (the
same verb on a built-in); and the DLJob's status written again by a PUT of the whole object
instead of a merge patch (``dljob_status_put``: whether the server-side merge is the cost).

Writes ``benchmarks/results/apiserver-costs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from operator_e2e import dljob, gpu_cluster  # noqa: E402

from horus.api.raw import discard  # noqa: E402
from horus.common import constants as c  # noqa: E402

NS = "costs"
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def status_patch(i: int) -> dict[str, Any]:
    """The operator's placement record for one single-GPU replica (as ``reconcile._commit``)."""
    now = "2026-01-01T00:00:00Z"
    return {
        "status": {
            "phase": c.DLJOB_PHASE_SCHEDULED,
            "reason": "Placed",
            "message": "placed by policy horus: replica 0 → bench-0001/gpu-3 (25% core, "
            "4096 MiB); predicted speed 0.93",
            "placements": [
                {
                    "replica": 0,
                    "pod": f"j-{i:04d}-0",
                    "node": "bench-0001",
                    "gpuUUID": "GPU-00000000-0000-0000-0000-000000000003",
                    "gpuIndex": 3,
                    "corePercent": 25,
                    "memoryMiB": 4096,
                }
            ],
            "scheduledTime": now,
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "True",
                    "reason": "Placed",
                    "message": "placed",
                    "lastTransitionTime": now,
                }
            ],
        }
    }


LITE_PLURAL = "dljoblites"


def dljob_crd_copy(
    plural: str, kind: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """The DLJob CRD as shipped, renamed to ``kind``/``plural``, without printer columns,
    with ``change`` applied to each version's ``spec`` schema. Measurement only."""
    import yaml

    doc = yaml.safe_load((ROOT / "manifests/crds/horus.io_dljobs.yaml").read_text())
    doc["metadata"] = {"name": f"{plural}.{c.API_GROUP}"}
    doc["spec"]["names"] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    for version in doc["spec"]["versions"]:
        change(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
        version.pop("additionalPrinterColumns", None)
    return dict(doc)


def lite_crd() -> dict[str, Any]:
    """``DLJobLite``: ``spec.template`` not validated (``x-kubernetes-preserve-unknown-fields``)
    instead of Kubernetes' PodSpec schema: a probe of how much of a DLJob write the
    template's schema costs."""

    def change(spec: dict[str, Any]) -> None:
        spec["properties"]["template"] = {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }

    return dljob_crd_copy(LITE_PLURAL, "DLJobLite", change)


TINY_PLURAL = "probes"
ATOMIC_PLURAL = "dljobatomics"


def atomic_crd() -> dict[str, Any]:
    """``DLJobAtomic``: ``spec.profile.features`` marked ``x-kubernetes-map-type: atomic``,
    so its tens of features are one field to the apiserver's field manager
    (``managedFields``) instead of one each: a probe of what tracking them costs a write."""

    def change(spec: dict[str, Any]) -> None:
        spec["properties"]["profile"]["properties"]["features"]["x-kubernetes-map-type"] = "atomic"

    return dljob_crd_copy(ATOMIC_PLURAL, "DLJobAtomic", change)


def tiny_crd() -> dict[str, Any]:
    """A custom resource with no schema to speak of (everything preserved, no CEL rules, no
    printer columns) and a status subresource: a probe of what any custom resource's write
    costs the apiserver, whatever its schema or size. Measurement only."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{TINY_PLURAL}.{c.API_GROUP}"},
        "spec": {
            "group": c.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "Probe",
                "listKind": "ProbeList",
                "plural": TINY_PLURAL,
                "singular": "probe",
            },
            "versions": [
                {
                    "name": c.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def pod(i: int) -> dict[str, Any]:
    amount = {c.RESOURCE_GPU_CORE: "25", c.RESOURCE_GPU_MEMORY: "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"j-{i:04d}-0",
            "labels": {c.LABEL_DLJOB_NAME: f"j-{i:04d}"},
            # About the size of a signed assignment and a prediction annotation.
            "annotations": {
                c.ANNOTATION_GPU_ASSIGNMENT: "a" * 400,
                c.ANNOTATION_PREDICTED: "p" * 200,
            },
        },
        "spec": {
            "schedulerName": c.SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": amount, "limits": amount},
                }
            ],
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="requests of each kind (1..5000)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/apiserver-costs.json")
    args = ap.parse_args()
    if not 1 <= args.requests <= 5000:
        ap.error(f"--requests must be 1..5000, got {args.requests}")
    n = args.requests
    local, state, api = gpu_cluster("horus-bench-costs-", 50, 8, 20)
    try:
        from kubernetes import client

        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NS}})
        ext: Any = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(lite_crd())
        ext.create_custom_resource_definition(tiny_crd())
        ext.create_custom_resource_definition(atomic_crd())
        for plural in (LITE_PLURAL, TINY_PLURAL, ATOMIC_PLURAL):
            for _ in range(300):  # until the apiserver serves it
                conds = ext.read_custom_resource_definition(f"{plural}.{c.API_GROUP}").status
                if any(
                    x.type == "Established" and x.status == "True" for x in conds.conditions or []
                ):
                    break
                time.sleep(0.1)
        pids = {p.name: p.pid for p in state.processes if p.name in ("kube-apiserver", "etcd")}
        if len(pids) != 2:
            raise RuntimeError(f"kube-apiserver and etcd not found among {state.processes}")
        time.sleep(2.0)

        def window(fn: Callable[[int], None] | None, seconds: float = 0.0) -> dict[str, float]:
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            t0 = time.perf_counter()
            if fn is None:
                time.sleep(seconds)
            else:
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(fn, range(n)))
            wall = time.perf_counter() - t0
            time.sleep(1.0)  # let watch fan-out and etcd writes of the burst finish
            out = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
            out["wall"] = wall + 1.0
            return out

        def creates(
            plural: str, kind: str, body: Callable[[str], dict[str, Any]], prefix: str = "j"
        ) -> Callable[[int], None]:
            """Create request ``i`` of a custom resource: ``body(name)`` as ``kind``."""

            def create(i: int) -> None:
                obj = {**body(f"{prefix}-{i:04d}"), "kind": kind}
                discard(
                    custom.create_namespaced_custom_object(
                        c.API_GROUP, c.API_VERSION, NS, plural, obj, _preload_content=False
                    )
                )

            return create

        #: The DLJobs as their status patch left them (the PUT probe replaces their status).
        patched: dict[int, dict[str, Any]] = {}

        def status_patches(plural: str, prefix: str = "j") -> Callable[[int], None]:
            """Status merge patch ``i`` (the operator's placement record) of ``plural``."""

            def patch(i: int) -> None:
                resp = custom.patch_namespaced_custom_object_status(
                    c.API_GROUP,
                    c.API_VERSION,
                    NS,
                    plural,
                    f"{prefix}-{i:04d}",
                    status_patch(i),
                    _preload_content=False,
                )
                if plural == c.DLJOB_PLURAL and prefix == "j":
                    patched[i] = json.loads(resp.data)
                else:
                    discard(resp)

            return patch

        def status_put(i: int) -> None:
            """The same record as a PUT of the whole object (with its resourceVersion, as a
            precondition), the patch's alternative: no merge on the server's side."""
            obj = patched[i]
            obj["status"] = {**obj["status"], "message": f"replaced {i}"}
            discard(
                custom.replace_namespaced_custom_object_status(
                    c.API_GROUP,
                    c.API_VERSION,
                    NS,
                    c.DLJOB_PLURAL,
                    f"j-{i:04d}",
                    obj,
                    _preload_content=False,
                )
            )

        def tiny(name: str) -> dict[str, Any]:
            return {
                "apiVersion": c.API_GROUP_VERSION,
                "metadata": {"name": name, "namespace": NS},
                "spec": {"replicas": 1},
            }

        def pod_status(i: int) -> None:
            # the same kind of write on a built-in: a merge patch of the pod's status
            body = {"status": {"message": f"probe {i}", "reason": "Probe"}}
            discard(
                core.patch_namespaced_pod_status(f"j-{i:04d}-0", NS, body, _preload_content=False)
            )

        def pod_create(i: int) -> None:
            discard(core.create_namespaced_pod(NS, pod(i), _preload_content=False))

        def binding(i: int) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"j-{i:04d}-0", "namespace": NS},
                "target": {"apiVersion": "v1", "kind": "Node", "name": f"bench-{i % 50:04d}"},
            }
            discard(core.create_namespaced_binding(NS, body, _preload_content=False))

        def event(i: int) -> None:
            body = {
                "metadata": {"generateName": f"j-{i:04d}.", "namespace": NS},
                "involvedObject": {
                    "apiVersion": c.API_GROUP_VERSION,
                    "kind": c.DLJOB_KIND,
                    "name": f"j-{i:04d}",
                    "namespace": NS,
                },
                "reason": "Scheduled",
                "message": "placed by policy horus",
                "type": "Normal",
                "source": {"component": "horus-operator"},
                "firstTimestamp": "2026-01-01T00:00:00Z",
                "lastTimestamp": "2026-01-01T00:00:00Z",
                "count": 1,
            }
            discard(core.create_namespaced_event(NS, body, _preload_content=False))

        idle = window(None, 3.0)
        idle_rate = {k: idle[k] / idle["wall"] for k in pids}
        kinds = {
            "dljob_create": creates(c.DLJOB_PLURAL, c.DLJOB_KIND, dljob),
            "dljob_status_patch": status_patches(c.DLJOB_PLURAL),
            "pod_create": pod_create,
            "binding": binding,
            "event": event,
            # the probe: the same DLJob writes without the pod template's schema
            "dljob_lite_create": creates(LITE_PLURAL, "DLJobLite", dljob),
            "dljob_lite_status_patch": status_patches(LITE_PLURAL),
            # the probes of issue 27's question (why a DLJob write costs several pod creates):
            # the same status patch on a custom resource without a schema, and a status merge
            # patch on a pod
            "tiny_cr_create": creates(TINY_PLURAL, "Probe", tiny),
            "tiny_cr_status_patch": status_patches(TINY_PLURAL),
            "pod_status_patch": pod_status,
            # and on a schemaless custom resource carrying a whole DLJob's body: size alone
            "sized_cr_create": creates(TINY_PLURAL, "Probe", dljob, prefix="s"),
            "sized_cr_status_patch": status_patches(TINY_PLURAL, prefix="s"),
            # and the DLJob with its profile's features one atomic field
            "dljob_atomic_features_create": creates(ATOMIC_PLURAL, "DLJobAtomic", dljob),
            "dljob_atomic_features_status_patch": status_patches(ATOMIC_PLURAL),
            # and the DLJob's status written by PUT instead of a merge patch (a second write)
            "dljob_status_put": status_put,
        }
        per: dict[str, dict[str, float]] = {}
        for name, fn in kinds.items():
            w = window(fn)
            row = {
                f"{k}_ms": round(max(0.0, w[k] - idle_rate[k] * w["wall"]) * 1e3 / n, 2)
                for k in pids
            }
            row["requests_per_s"] = round(n / (w["wall"] - 1.0), 1)
            per[name] = row
            print(f"{name:20s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)

        def total(names: list[str]) -> float:
            return round(sum(per[x]["kube-apiserver_ms"] + per[x]["etcd_ms"] for x in names), 2)

        # The writes one job costs (docs/operator.md, "Status, conditions, Events"; since issue
        # 27 no Normal Events unless --lifecycle-events): the user's DLJob, the signed record,
        # the pod, its Binding — then the Running status. Stock: the user's pod, the
        # kube-scheduler's Binding and its Scheduled Event.
        horus_path = ["dljob_create", "dljob_status_patch", "pod_create", "binding"]
        stock_path = ["pod_create", "binding", "event"]
        result = {
            "benchmark": "apiserver-costs",
            "command": "benchmarks/apiserver_costs.py " + " ".join(sys.argv[1:]),
            "requests_per_kind": n,
            "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
            "idle_cpu_share": {k: round(v, 3) for k, v in idle_rate.items()},
            "per_request": per,
            "horus_path": horus_path,
            "stock_path": stock_path,
            "horus_job_until_bound_ms": total(horus_path),
            "horus_running_status_ms": total(["dljob_status_patch"]),
            "stock_pod_until_bound_ms": total(stock_path),
        }
        result["ratio_horus_over_stock"] = round(
            result["horus_job_until_bound_ms"] / result["stock_pod_until_bound_ms"], 2
        )
        result["status_patch_ratio_full_schema_over_lite"] = round(
            total(["dljob_status_patch"]) / max(total(["dljob_lite_status_patch"]), 1e-9), 2
        )
        result["status_patch_ratio_dljob_over_schemaless_cr"] = round(
            total(["dljob_status_patch"]) / max(total(["tiny_cr_status_patch"]), 1e-9), 2
        )
        result["status_patch_ratio_dljob_body_over_tiny_schemaless"] = round(
            total(["sized_cr_status_patch"]) / max(total(["tiny_cr_status_patch"]), 1e-9), 2
        )
        result["status_patch_ratio_dljob_over_atomic_features"] = round(
            total(["dljob_status_patch"])
            / max(total(["dljob_atomic_features_status_patch"]), 1e-9),
            2,
        )
        result["status_patch_ratio_schemaless_cr_over_pod"] = round(
            total(["tiny_cr_status_patch"]) / max(total(["pod_status_patch"]), 1e-9), 2
        )
        result["status_put_over_patch"] = round(
            total(["dljob_status_put"]) / max(total(["dljob_status_patch"]), 1e-9), 2
        )
        result["create_ratio_full_schema_over_lite"] = round(
            total(["dljob_create"]) / max(total(["dljob_lite_create"]), 1e-9), 2
        )
        result["ratio_with_running_over_stock"] = round(
            (result["horus_job_until_bound_ms"] + result["horus_running_status_ms"])
            / result["stock_pod_until_bound_ms"],
            2,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"apiserver+etcd CPU per job until Bound: Horus {result['horus_job_until_bound_ms']} ms"
            f" (+{result['horus_running_status_ms']} ms for Running), stock "
            f"{result['stock_pod_until_bound_ms']} ms per pod: "
            f"{result['ratio_horus_over_stock']}x ({result['ratio_with_running_over_stock']}x "
            f"with Running)\nDLJob status patch with / without the template's schema: "
            f"{result['status_patch_ratio_full_schema_over_lite']}x, create "
            f"{result['create_ratio_full_schema_over_lite']}x\nwrote {args.out}"
        )
        return 0
    finally:
        local.down(quiet=True)


if __name__ == "__main__":
    raise SystemExit(main())
