"""examples/kueue/ say what the code reads: the AdmissionCheck's controller, the quota in Horus'
units, and pod templates whose request and profile reference the Kueue check reads as gangs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.operator.kueue.demand import pod_set_demand
from horus.operator.kueue.workload import PodSet, Workload

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "kueue"
PROFILE = (ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def workload(pod_sets: list[PodSet]) -> Workload:
    return Workload("default", "wl", "uid", "", 0, tuple(pod_sets), True, False, False, ())


def test_the_queues_name_horus_check_and_count_horus_units() -> None:
    by_kind = {d["kind"]: d for d in docs("queues.yaml")}
    check = by_kind["AdmissionCheck"]
    assert check["spec"]["controllerName"] == c.KUEUE_ADMISSION_CHECK_CONTROLLER
    cq = by_kind["ClusterQueue"]["spec"]
    assert cq["admissionChecksStrategy"]["admissionChecks"] == [{"name": check["metadata"]["name"]}]
    (group,) = cq["resourceGroups"]
    assert {c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY} <= set(group["coveredResources"])
    assert (
        by_kind["LocalQueue"]["spec"]["clusterQueue"] == by_kind["ClusterQueue"]["metadata"]["name"]
    )


def test_the_jobset_is_one_gang_of_four_at_its_share() -> None:
    (js,) = docs("jobset.yaml")
    (rj,) = js["spec"]["replicatedJobs"]
    job = rj["template"]["spec"]
    ann = job["template"]["metadata"]["annotations"]
    read = {
        ("default", ann[c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP]): {
            c.PROFILE_CONFIGMAP_DEFAULT_KEY: PROFILE
        }
    }
    demand = pod_set_demand(
        workload([PodSet(rj["name"], job["parallelism"], job["template"])]),
        PodSet(rj["name"], job["parallelism"], job["template"]),
        lambda ns, name: read[(ns, name)],
        81920,
    )
    assert demand.problem is None and demand.request is not None
    assert (demand.request.replicas, demand.request.core_percent) == (4, 40)
    assert demand.request.memory_mib == 64 * c.DEFAULT_GPU_MEMORY_UNIT_MIB
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ml-team"


def test_the_trainjob_asks_horus_resources_and_patches_in_its_profile() -> None:
    (tj,) = docs("trainjob.yaml")
    limits = tj["spec"]["trainer"]["resourcesPerNode"]["limits"]
    assert {c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY} <= set(limits)
    (patch,) = tj["spec"]["runtimePatches"]
    (rj,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    ann = rj["template"]["spec"]["template"]["metadata"]["annotations"]
    assert c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP in ann


def test_the_gang_without_kueue_names_its_size() -> None:
    (job,) = docs("gang-without-kueue.yaml")
    meta = job["spec"]["template"]["metadata"]
    assert meta["labels"][c.LABEL_GANG_NAME] == job["metadata"]["name"]
    assert int(meta["annotations"][c.ANNOTATION_GANG_SIZE]) == job["spec"]["parallelism"]


def test_pods_under_kueue_are_counted_by_the_namespaces_template() -> None:
    """The ClusterQueue has a quota of the shares Kueue counts a Deployment's pods by; the
    namespace's template asks for one device of the class Kueue maps to them, under the name
    the admission policy gives such a pod; the Deployment is a pod integration asking for a
    Horus share."""
    by_kind = {d["kind"]: d for d in docs("queues.yaml")}
    (group,) = by_kind["ClusterQueue"]["spec"]["resourceGroups"]
    assert c.KUEUE_SHARES_RESOURCE in group["coveredResources"]
    quotas = {r["name"] for f in group["flavors"] for r in f["resources"]}
    assert c.KUEUE_SHARES_RESOURCE in quotas
    template = by_kind["ResourceClaimTemplate"]
    assert template["metadata"]["name"] == c.KUEUE_CLAIM_TEMPLATE
    assert template["metadata"]["namespace"] == by_kind["LocalQueue"]["metadata"]["namespace"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": c.KUEUE_DEVICE_CLASS, "count": 1}
    (dep,) = docs("deployment.yaml")
    pod = dep["spec"]["template"]
    assert (
        pod["metadata"]["labels"][c.KUEUE_QUEUE_NAME_LABEL]
        == by_kind["LocalQueue"]["metadata"]["name"]
    )
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert {c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY} <= set(limits)
    assert c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP in pod["metadata"]["annotations"]


def test_the_dev_clusters_kueue_counts_the_template_as_shares() -> None:
    from horus.devcluster.workload_manifests import KUEUE_HORUS_DEVICE_CLASS_MAPPING, kueue_config

    cfg = kueue_config(
        namespace="kueue-system", cert_dir=ROOT, webhook_port=1, metrics_port=2,
        health_port=3, visibility_port=4,
    )  # fmt: skip
    assert cfg["resources"]["deviceClassMappings"] == [KUEUE_HORUS_DEVICE_CLASS_MAPPING]
    assert KUEUE_HORUS_DEVICE_CLASS_MAPPING == {
        "name": c.KUEUE_SHARES_RESOURCE,
        "deviceClassNames": [c.KUEUE_DEVICE_CLASS],
    }
