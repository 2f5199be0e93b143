"""The operator's commit path on DRA (issue 25 item 3) on a real apiserver and kube-scheduler.

A reconcile pass (``Reconciler(placement_path="dra")``, in-process, the real
:class:`~horus.operator.jobapi.KubeJobApi`) places DLJobs on a kwok node whose two GPUs of
81,559 MiB the real DRA driver publishes (fixtures ``dra_env``/``driver``): the record in the
DLJob status first, then one ResourceClaim per replica and a pod using it; the stock
kube-scheduler allocates each claim and binds each pod. The API is scoped to the test's
namespace and node (:class:`Scoped`), so other tests' jobs and nodes in the session cluster
are never touched.

The race a real cluster has — a tenant's claim allocated between Horus' decision and the
allocation of Horus' own claim — is made to happen at a fixed point (:attr:`Scoped.before_claim`
runs before Horus creates its claim); everything after it is the real kube-scheduler's and
the operator's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from dra_cluster_support import GPU_MIB, ROOT, DraEnv, RunningDriver, ScopedJobs
from test_dra_cluster import consumed, wait_for

from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor
from signing_keys import KEY

PREDICTOR = load_default_predictor()


class Scoped(ScopedJobs):
    """The real API, seeing only the test's namespace and node."""

    def __init__(self, api_client: Any, namespace: str, node: str) -> None:
        super().__init__(api_client, namespace, {node})
        self.node = node
        #: called with (namespace, claim manifest) before Horus creates a claim, once
        self.before_claim: Callable[[str, dict[str, Any]], None] | None = None

    def create_resource_claim(self, namespace: str, manifest: Any) -> dict[str, Any] | None:
        hook, self.before_claim = self.before_claim, None
        if hook is not None:
            hook(namespace, dict(manifest))
        return super().create_resource_claim(namespace, manifest)


@pytest.fixture(scope="module")
def crd(dra_env: DraEnv) -> None:
    # as on the DRA path: no device plugin, so no inventory annotation — the GPUs the
    # operator places on are the ones the driver's ResourceSlice publishes
    dra_env.kubectl("annotate", "node", dra_env.node, f"{c.ANNOTATION_GPU_INVENTORY}-")
    dra_env.cluster.apply_crds(
        ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml", c.DLJOB_CRD_NAME
    )


@pytest.fixture
def placer(
    dra_env: DraEnv, driver: RunningDriver, crd: None
) -> Iterator[tuple[Scoped, Reconciler]]:
    api = Scoped(dra_env.cluster.api_client(), dra_env.namespace, dra_env.node)
    rec = Reconciler(
        api,
        PREDICTOR,
        KEY,
        workers=4,
        correction_period=0,
        placement_path=c.PLACEMENT_PATH_DRA,
    )
    wait_for("the driver's slice", dra_env.slices, 60)
    try:
        yield api, rec
    finally:
        dra_env.kubectl(
            "delete", "dljobs", "--all", "-n", dra_env.namespace, "--wait=false", check=False
        )
        rec.run_pass()  # its claims and pods go with the jobs
        rec.close()
        dra_env.kubectl(
            "delete",
            "pods",
            "--all",
            "-n",
            dra_env.namespace,
            "--grace-period=0",
            "--force",
            check=False,
        )
        dra_env.kubectl(
            "delete", "resourceclaims", "--all", "-n", dra_env.namespace, "--wait=true", check=False
        )


def dljob(namespace: str, name: str, replicas: int, core: int, mib: int) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text())
    return {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "profile": {
                k: doc[k] for k in ("model", "batchSize", "features", "family") if k in doc
            },
            "gpu": {"mode": "explicit", "corePercent": core, "memoryMiB": mib},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }


def status(env: DraEnv, name: str) -> dict[str, Any]:
    out: dict[str, Any] = env.get("dljob", name).get("status") or {}
    return out


def passes_until(rec: Reconciler, what: str, probe: Callable[[], Any], timeout: float = 90) -> Any:
    def step() -> Any:
        rec.run_pass()
        return probe()

    return wait_for(what, step, timeout)


def claims(env: DraEnv) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        env.kubectl("get", "resourceclaims", "-n", env.namespace, "-o", "json").stdout
    )["items"]
    return items


def gpu_load(env: DraEnv) -> dict[str, tuple[int, int]]:
    """device → (cores, MiB) consumed by every allocated claim: the kube-scheduler's books."""
    load: dict[str, tuple[int, int]] = {}
    for claim in claims(env):
        for res in (
            ((claim.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        ):
            cores, mib = consumed(res)
            have = load.get(res["device"], (0, 0))
            load[res["device"]] = (have[0] + cores, have[1] + mib)
    return load


def assert_never_over(env: DraEnv) -> None:
    for device, (cores, mib) in gpu_load(env).items():
        assert cores <= 100 and mib <= GPU_MIB, f"{device} over-committed: {cores} %, {mib} MiB"


def test_a_gang_is_recorded_then_each_claim_is_allocated_on_exactly_its_recorded_gpu(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    _, rec = placer
    # 60 % each: the two replicas cannot share a GPU, so the gang takes both
    dra_env.apply(dljob(dra_env.namespace, "gang", replicas=2, core=60, mib=30000))
    passes_until(rec, "gang scheduled", lambda: status(dra_env, "gang").get("placements"))
    records = {r["replica"]: r for r in status(dra_env, "gang")["placements"]}
    assert {r["gpuIndex"] for r in records.values()} == {0, 1}

    def allocated_all() -> list[dict[str, Any]] | None:
        got = [cl for cl in claims(dra_env) if (cl.get("status") or {}).get("allocation")]
        return got if len(got) == 2 else None

    for claim in wait_for("both claims allocated", allocated_all, 60):
        replica = int(claim["metadata"]["labels"][c.LABEL_REPLICA_INDEX])
        rec_ = records[replica]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        # the kube-scheduler allocated exactly the recorded GPU, with exactly the share
        assert (result["pool"], result["device"]) == (rec_["node"], f"gpu-{rec_['gpuIndex']}")
        assert consumed(result) == (60, 30000)
        assert rec_["gpuUUID"] == simulated_gpu_uuid(dra_env.node, rec_["gpuIndex"])
        assert claim["status"]["reservedFor"][0]["name"] == rec_["pod"]
        pod = dra_env.get("pod", rec_["pod"])
        assert pod["spec"]["nodeName"] == dra_env.node  # bound by the kube-scheduler
        assert pod["spec"].get("schedulerName") == "default-scheduler"
    passes_until(rec, "gang Running", lambda: status(dra_env, "gang").get("phase") == "Running")
    # a third 60 % replica fits nowhere: queued with the core's reason, nothing over-committed
    dra_env.apply(dljob(dra_env.namespace, "third", replicas=1, core=60, mib=1000))
    passes_until(rec, "third queued", lambda: status(dra_env, "third").get("phase") == "Queued")
    assert not status(dra_env, "third").get("placements")
    assert_never_over(dra_env)


def test_a_decision_a_tenant_claim_overtook_is_re_placed_never_over_committed_or_failed(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    api, rec = placer
    taken: dict[str, str] = {}

    def tenant_first(namespace: str, manifest: dict[str, Any]) -> None:
        """A tenant's claim (no Horus owner) for 70 % of the GPU Horus just chose, with its
        pod, allocated by the kube-scheduler before Horus' claim exists."""
        selector = manifest["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        taken["selector"] = selector[0]["cel"]["expression"]
        dra_env.apply(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "tenant", "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": c.DRA_DEVICE_CLASS,
                                    "selectors": selector,
                                    "capacity": {"requests": {"cores": "70", "memory": "1000Mi"}},
                                },
                            }
                        ]
                    }
                },
            }
        )
        dra_env.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "tenant", "namespace": namespace},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "tenant"}],
                },
            }
        )
        wait_for(
            "the tenant's claim allocated",
            lambda: (dra_env.get("resourceclaim", "tenant").get("status") or {}).get("allocation"),
            60,
        )

    api.before_claim = tenant_first
    dra_env.apply(dljob(dra_env.namespace, "late", replicas=1, core=50, mib=8000))
    passes_until(rec, "late scheduled", lambda: status(dra_env, "late").get("placements"))
    first = status(dra_env, "late")["placements"][0]
    tenant = dra_env.get("resourceclaim", "tenant")["status"]["allocation"]["devices"]["results"][0]
    assert tenant["device"] == f"gpu-{first['gpuIndex']}"  # the tenant took Horus' GPU first

    def unschedulable() -> str | None:
        pod = dra_env.get("pod", "late-0")
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return str(cond.get("message"))
        return None

    # the kube-scheduler refuses to over-commit: Horus' claim stays unallocated, with its reason
    why = wait_for("late-0 unschedulable", unschedulable, 60)
    assert "cannot allocate all claims" in why
    assert not (dra_env.get("resourceclaim", "late-0-gpu").get("status") or {}).get("allocation")
    assert_never_over(dra_env)
    phases: list[str] = []

    def re_placed_and_allocated() -> bool:
        st = status(dra_env, "late")
        phases.append(str(st.get("phase")))
        placed = st.get("placements") or []
        if not placed or placed[0]["gpuIndex"] == first["gpuIndex"]:
            return False
        claim = dra_env.kubectl(
            "get", "resourceclaim", "late-0-gpu", "-n", dra_env.namespace, "-o", "json", check=False
        )
        if claim.returncode:
            return False
        alloc = (json.loads(claim.stdout).get("status") or {}).get("allocation")
        return (
            bool(alloc)
            and alloc["devices"]["results"][0]["device"] == f"gpu-{placed[0]['gpuIndex']}"
        )

    passes_until(rec, "late re-placed on the other GPU and allocated", re_placed_and_allocated, 120)
    assert "Failed" not in phases
    rec.writer.drain()
    events = dra_env.kubectl(
        "get",
        "events",
        "-n",
        dra_env.namespace,
        "--field-selector",
        "involvedObject.name=late",
        "-o",
        "json",
    ).stdout
    assert "ClaimOvertaken" in events  # it was re-placed because the claim was overtaken
    passes_until(rec, "late Running", lambda: status(dra_env, "late").get("phase") == "Running")
    assert_never_over(dra_env)
    assert gpu_load(dra_env)[f"gpu-{first['gpuIndex']}"][0] == 70  # the tenant's, untouched


@pytest.fixture
def conversion(dra_env: DraEnv) -> Iterator[None]:
    """The admission policy (examples/dra/extended-resources-policy.yaml) in force, bound to
    this test's namespace only."""
    versions = dra_env.kubectl("api-versions").stdout.split()
    assert "admissionregistration.k8s.io/v1" in versions
    docs = list(
        yaml.safe_load_all(
            (ROOT / "examples" / "dra" / "extended-resources-policy.yaml").read_text()
        )
    )
    policy, binding = docs
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": dra_env.namespace}}
    }
    for doc in (policy, binding):
        dra_env.apply(doc)
    try:
        yield
    finally:
        for doc in (binding, policy):
            dra_env.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], check=False)


def test_a_plain_pods_horus_requests_become_a_claim_on_the_gpu_horus_chose(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler], conversion: None
) -> None:
    """The admission policy turns a plain pod's horus.io/gpu-* requests into a claim
    reference; the operator pass chooses the GPU — not the first fit: the GPU a job already
    uses has room, the pod goes to the other — and makes the claim, which the kube-scheduler
    allocates."""
    _, rec = placer
    dra_env.apply(dljob(dra_env.namespace, "busy", replicas=1, core=40, mib=8000))
    passes_until(rec, "busy scheduled", lambda: status(dra_env, "busy").get("placements"))
    busy = status(dra_env, "busy")["placements"][0]
    wait_for(
        "busy's claim allocated",
        lambda: (dra_env.get("resourceclaim", "busy-0-gpu").get("status") or {}).get("allocation"),
        60,
    )
    pod = _gpu_pod("plain", dra_env.namespace, 30, 32)

    # the policy may take a moment to be in force after it is created
    def created() -> dict[str, Any] | None:
        out = dra_env.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(pod))
        made: dict[str, Any] = json.loads(out.stdout)
        if made["spec"].get("resourceClaims"):
            return made
        dra_env.kubectl(
            "delete",
            "pod",
            made["metadata"]["name"],
            "-n",
            dra_env.namespace,
            "--grace-period=0",
            "--force",
        )
        return None

    made = wait_for("the policy converts the pod", created, 60)
    name = made["metadata"]["name"]
    (entry,) = made["spec"]["resourceClaims"]
    assert entry == {"name": "horus-gpu", "resourceClaimName": "horus-gpu-plain"}
    res = made["spec"]["containers"][0]["resources"]
    assert c.RESOURCE_GPU_CORE not in json.dumps(res) and res["claims"] == [{"name": "horus-gpu"}]
    ann = made["metadata"]["annotations"]
    assert (ann[c.ANNOTATION_GPU_CORE_REQUEST], ann[c.ANNOTATION_GPU_MEMORY_REQUEST]) == (
        "30",
        "32",
    )
    claim_name = entry["resourceClaimName"]

    def allocated_claim() -> dict[str, Any] | None:
        got = dra_env.kubectl(
            "get",
            "resourceclaim",
            claim_name,
            "-n",
            dra_env.namespace,
            "-o",
            "json",
            check=False,
        )
        if got.returncode:
            return None
        claim: dict[str, Any] = json.loads(got.stdout)
        return claim if (claim.get("status") or {}).get("allocation") else None

    claim = passes_until(rec, "the converted claim made and allocated", allocated_claim, 90)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert busy["gpuIndex"] == 0  # a first fit in device order would share gpu-0 (room: 60 %)
    assert result["device"] == "gpu-1"  # Horus chose the GPU without the job
    assert consumed(result) == (30, 32 * 256)
    assert claim["status"]["reservedFor"][0]["name"] == name
    assert claim["metadata"]["ownerReferences"][0]["name"] == name
    bound = wait_for("the pod bound", lambda: dra_env.get("pod", name)["spec"].get("nodeName"), 60)
    assert bound == dra_env.node
    assert_never_over(dra_env)


def _gpu_pod(name: str, namespace: str, core: int, units: int) -> dict[str, Any]:
    """A plain pod asking horus.io/gpu-core / gpu-memory (units of 256 MiB), as users write it
    for the device-plugin path."""
    profile = (ROOT / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": {c.ANNOTATION_GRAPH_PROFILE: profile},
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "limits": {
                            c.RESOURCE_GPU_CORE: str(core),
                            c.RESOURCE_GPU_MEMORY: str(units),
                        }
                    },
                }
            ],
        },
    }


def _events(env: DraEnv, pod: str) -> list[str]:
    items = json.loads(
        env.kubectl(
            "get",
            "events",
            "-n",
            env.namespace,
            "--field-selector",
            f"involvedObject.name={pod}",
            "-o",
            "json",
        ).stdout
    )["items"]
    return [f"{e['reason']}: {e['message']}" for e in items]


def test_a_deployments_pods_get_claims_horus_pins_and_claims_it_did_not_make_stay_untouched(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler], conversion: None, request: Any
) -> None:
    """Pods a controller makes (only generateName: no name, no UID at admission) asking
    horus.io/gpu-*: the policy points them at the placeholder template; the operator makes
    each its claim horus-gpu-<pod UID>, pinned to the GPU it chose and controlled by the pod;
    the kube-controller-manager's resourceclaim controller records it in the pod's status;
    the kube-scheduler allocates it and binds the pod. And as a tenant: a claim made first
    under a pod's claim name, and a pod that names another pod's claim in its own spec, get
    nothing from Horus — no claim adopted, changed or deleted; each pod told why."""
    _, rec = placer
    ns = dra_env.namespace
    # the policy may take a moment to be in force: a generateName probe shows when it is
    probe = _gpu_pod("probe", ns, 10, 4)
    del probe["metadata"]["name"]
    probe["metadata"]["generateName"] = "probe-"

    def converted_probe() -> bool:
        made = json.loads(
            dra_env.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(probe)).stdout
        )
        dra_env.kubectl(
            "delete", "pod", made["metadata"]["name"], "-n", ns, "--grace-period=0", "--force"
        )
        return bool(made["spec"].get("resourceClaims"))

    wait_for("the policy converts a generateName pod", converted_probe, 60)
    template = _gpu_pod("web", ns, 30, 32)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {
                    "labels": template["metadata"]["labels"],
                    "annotations": template["metadata"]["annotations"],
                },
                "spec": template["spec"],
            },
        },
    }
    dra_env.apply(deployment)
    request.addfinalizer(
        lambda: dra_env.kubectl("delete", "deployment", "web", "-n", ns, check=False)
    )

    def web_pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            dra_env.kubectl("get", "pods", "-n", ns, "-l", "app=web", "-o", "json").stdout
        )["items"]
        return items

    def all_bound() -> list[dict[str, Any]] | None:
        pods = web_pods()
        ok = len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)
        return pods if ok else None

    pods = passes_until(rec, "both Deployment pods bound", all_bound, 120)
    devices = set()
    for pod in pods:
        meta = pod["metadata"]
        assert "generateName" in meta and meta["name"].startswith("web-")
        (entry,) = pod["spec"]["resourceClaims"]
        assert entry == {
            "name": "horus-gpu",
            "resourceClaimTemplateName": "horus-gpu-made-by-horus",
        }
        want = f"horus-gpu-{meta['uid']}"
        assert pod["status"]["resourceClaimStatuses"] == [
            {"name": "horus-gpu", "resourceClaimName": want}
        ]  # recorded by the resourceclaim controller: the claim Horus made
        claim = dra_env.get("resourceclaim", want)
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["uid"], owner["controller"]) == (meta["uid"], True)
        assert claim["metadata"]["annotations"][c.ANNOTATION_CONVERTED_FOR] == meta["uid"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert consumed(result) == (30, 32 * 256)
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
        ]
        # pinned by Horus: the selector names exactly the GPU the kube-scheduler allocated
        index = int(result["device"].removeprefix("gpu-"))
        (sel,) = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        assert simulated_gpu_uuid(dra_env.node, index) in sel["cel"]["expression"]
        assert any(
            e.startswith("GPUChosen: ") and want in e for e in _events(dra_env, meta["name"])
        )
        devices.add(result["device"])
    # 30 % each and the GPUs empty: interference keeps them apart (a first fit would stack)
    assert devices == {"gpu-0", "gpu-1"}
    assert_never_over(dra_env)

    # --- as a tenant ---------------------------------------------------------------------
    # 1. a claim made first under a named pod's claim name (a tenant's own, 10 cores)
    squat = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "horus-gpu-squat", "namespace": ns},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": c.DRA_DEVICE_CLASS,
                            "capacity": {"requests": {"cores": "10", "memory": "1Gi"}},
                        },
                    }
                ]
            }
        },
    }
    dra_env.apply(squat)
    squat_before = dra_env.get("resourceclaim", "horus-gpu-squat")
    dra_env.apply(_gpu_pod("squat", ns, 20, 4))
    # 2. a pod naming, in its own spec, a Deployment pod's claim (no horus.io/gpu-* resource,
    # so the policy leaves it as written; the annotations as the policy would write them)
    victim = pods[0]
    victim_claim = f"horus-gpu-{victim['metadata']['uid']}"
    victim_before = dra_env.get("resourceclaim", victim_claim)
    thief = _gpu_pod("thief", ns, 20, 4)
    thief["metadata"]["annotations"].update(
        {c.ANNOTATION_GPU_CORE_REQUEST: "20", c.ANNOTATION_GPU_MEMORY_REQUEST: "4"}
    )
    thief["spec"]["containers"][0]["resources"] = {"claims": [{"name": "horus-gpu"}]}
    thief["spec"]["resourceClaims"] = [{"name": "horus-gpu", "resourceClaimName": victim_claim}]
    dra_env.apply(thief)

    def told(pod: str) -> list[str] | None:
        got = [e for e in _events(dra_env, pod) if e.startswith("ClaimNameTaken: ")]
        return got or None

    for pod in ("squat", "thief"):
        (line,) = passes_until(rec, f"{pod} told its claim name is taken", partial(told, pod), 60)
        assert "Horus did not make it for this pod" in line
    for _ in range(3):
        rec.run_pass()
    after = dra_env.get("resourceclaim", "horus-gpu-squat")
    assert after["metadata"]["uid"] == squat_before["metadata"]["uid"]
    assert after["spec"] == squat_before["spec"]
    # nothing of Horus' written on it
    assert after["metadata"].get("annotations") == squat_before["metadata"].get("annotations")
    assert after["metadata"].get("ownerReferences") is None
    stolen = dra_env.get("resourceclaim", victim_claim)
    assert stolen["metadata"]["uid"] == victim_before["metadata"]["uid"]
    for key in ("spec",):
        assert stolen[key] == victim_before[key]
    assert stolen["metadata"]["annotations"] == victim_before["metadata"]["annotations"]
    assert stolen["metadata"]["ownerReferences"] == victim_before["metadata"]["ownerReferences"]
    # Horus made no claim for either tenant pod
    made_for = {
        (cl["metadata"].get("annotations") or {}).get(c.ANNOTATION_CONVERTED_FOR)
        for cl in claims(dra_env)
    }
    for pod in ("squat", "thief"):
        assert dra_env.get("pod", pod)["metadata"]["uid"] not in made_for
    assert_never_over(dra_env)


def test_the_operator_process_places_through_claims_with_placement_path_dra(
    dra_env: DraEnv, crd: None, driver: RunningDriver, tmp_path: Path
) -> None:
    """The whole process (``python -m horus.operator --placement-path dra``: settings →
    controller → the watch-fed view's claims and slices → the pass): a DLJob's claim is made
    and allocated on its recorded GPU by the kube-scheduler and the job runs."""
    wait_for("the driver's slice", dra_env.slices, 60)
    log = tmp_path / "operator.log"
    argv = [
        sys.executable, "-m", "horus.operator",
        "--kubeconfig", dra_env.cluster.kubeconfig,
        "--lease-name", f"horus-operator-{uuid.uuid4().hex[:6]}",
        "--resync-period", "2", "--metrics-port", "0", "--correction-period", "0",
        "--placement-path", "dra",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        dra_env.apply(dljob(dra_env.namespace, "proc", replicas=1, core=25, mib=4096))

        def running() -> bool:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            return status(dra_env, "proc").get("phase") == "Running"

        wait_for("the operator's job Running", running, 120)
        placed = status(dra_env, "proc")["placements"][0]
        claim = dra_env.get("resourceclaim", "proc-0-gpu")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == f"gpu-{placed['gpuIndex']}" and consumed(result) == (25, 4096)
        assert dra_env.get("pod", "proc-0")["spec"]["nodeName"] == dra_env.node
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        dra_env.kubectl(
            "delete", "dljob", "proc", "-n", dra_env.namespace, "--wait=false", check=False
        )
        print(log.read_text(errors="replace")[-3000:])
