"""The dra path as the chart installs it (``gpuSharing.path: dra``) on two real nodes — kubelet
1.37 + containerd 2 with CDI, the real kube-scheduler, the chart's DaemonSet with the node
identity's pod-bound token (issue 25, "Must show"):

* the DaemonSet runs the DRA driver and not the device plugin, and the node identity can write
  neither another node's ResourceSlice nor any pod (it has no pod patch or create here);
* a two-replica DLJob placed by the operator through claims: each replica's claim is allocated
  by the kube-scheduler on exactly the GPU the DLJob's status records, and each container's
  environment equals its claim's consumed capacity and device;
* an 81,559 MiB GPU (a real H100's memory) takes a whole-GPU claim, then two half claims
  applied together — twins: equal cores, different memory, bound to one node at the same
  moment — and each container's environment, read from its own output, equals its own claim's
  consumed capacity and device;
* the agent enforces exactly those shares, read from the claims (its metrics), not from any
  field a tenant can write;
* a tenant's own claim that would over-commit the GPU stays unallocated with the
  kube-scheduler's reason, and the shares already there are untouched;
* a tenant with ``edit`` cannot change an allocation or what Prepare hands out: the status
  write is refused, the claim's spec is immutable, and an annotation they write on their pod
  changes nothing the agent enforces.

The release is upgraded to the dra path at the start and put back as it was at the end.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from realnode_support import (
    GPU_MEMORY_MIB,
    apply,
    claim_and_pod,
    pods_of,
    running,
    share_line,
    wait_for,
    workload_job,
)

from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RELEASE, RealCluster, install

HALF = GPU_MEMORY_MIB // 2  # 40,779 MiB; the other half is 40,780
HALVES = {"dra-half-a": ("50", f"{HALF}Mi"), "dra-half-b": ("50", f"{GPU_MEMORY_MIB - HALF}Mi")}
TENANT_NS = "tenant"


def _values(rc: RealCluster) -> dict[str, Any]:
    out = rc.kube.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml").stdout
    values: dict[str, Any] = yaml.safe_load(out) or {}
    return values


def _delete_slices(rc: RealCluster) -> None:
    for item in rc.kube.json("get", "resourceslices")["items"]:
        if item["spec"].get("driver") == c.DRA_DRIVER_NAME:
            rc.kube.kubectl("delete", "resourceslice", item["metadata"]["name"], check=False)


def _delete(rc: RealCluster, *names: str, namespace: str = "default") -> None:
    for name in names:
        rc.kube.kubectl(
            "delete", "pod", name, "-n", namespace, "--grace-period=0", "--force", check=False
        )
        rc.kube.kubectl("delete", "resourceclaim", name, "-n", namespace, check=False)


def _node_pod(rc: RealCluster, node: str) -> dict[str, Any]:
    pods = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=node",
        f"--field-selector=spec.nodeName={node}",
    )["items"]  # fmt: skip
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod: dict[str, Any] = pods[0]
    return pod


def _diagnose(rc: RealCluster, *names: str, namespace: str = "default") -> Any:
    def run() -> str:
        parts = [rc.kube.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout]
        for name in names:
            parts.append(
                rc.kube.kubectl("describe", "pod", name, "-n", namespace, check=False).stdout[
                    -2500:
                ]
            )
        for node in rc.nodes:
            pod = _node_pod(rc, node)["metadata"]["name"]
            for ctr in ("dra-driver", "agent"):
                logs = rc.kube.kubectl(
                    "logs", "-n", NAMESPACE, pod, "-c", ctr, "--tail=15", check=False
                )
                parts.append(f"--- {node} {ctr}\n{logs.stdout}{logs.stderr}")
        return "\n".join(parts)

    return run


def _consumed(claim: dict[str, Any]) -> tuple[str, str, int, int]:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    consumed = result["consumedCapacity"]
    return (
        result["pool"],
        result["device"],
        parse_quantity(consumed["cores"], "cores"),
        parse_quantity(consumed["memory"], "memory") // c.MIB,
    )


def _run_claimed(
    rc: RealCluster, pods: dict[str, tuple[str | None, str | None]], node: str
) -> dict[str, dict[str, Any]]:
    """Apply every claim and pod in one request (bound to ``node`` at the same moment), wait
    for each container's share line, and check it equals its claim's allocation."""
    docs = [d for name, (cores, mem) in pods.items() for d in claim_and_pod(name, node, cores, mem)]
    apply(rc, {"apiVersion": "v1", "kind": "List", "items": docs})
    lines = {}
    for name in pods:
        lines[name] = wait_for(
            f"{name}'s share line", lambda n=name: share_line(rc, n), 240, _diagnose(rc, name)
        )
        claim = rc.kube.json("get", "resourceclaim", name)
        pool, device, cores, memory = _consumed(claim)
        env = lines[name]["env"]
        assert (pool, device) == (node, "gpu-0")
        assert env[c.ENV_NODE_NAME] == node
        assert (env[c.ENV_GPU_CORE_PERCENT], env[c.ENV_GPU_MEMORY_MIB]) == (str(cores), str(memory))
        assert env[c.ENV_CLAIM_UID] == claim["metadata"]["uid"]
        assert env[c.ENV_POD_NAME] == name
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M"
        assert env[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == str(cores)
    return lines


@pytest.fixture(scope="module")
def on_dra(rc: RealCluster) -> Iterator[dict[str, Any]]:
    """The release on the dra path; yields the values it had before."""
    installed = _values(rc)
    on = copy.deepcopy(installed)
    on["gpuSharing"] = {"path": "dra"}
    _delete_slices(rc)  # every slice below is the DaemonSet's
    install(rc.kube, on)  # waits for each real node's ResourceSlice
    try:
        yield installed
    finally:
        _delete(rc, "dra-whole", *HALVES)
        _delete(rc, "over-commit", namespace=TENANT_NS)
        rc.kube.kubectl("delete", "namespace", TENANT_NS, "--wait=false", check=False)
        install(rc.kube, installed)  # back on the device-plugin path
        _delete_slices(rc)


@pytest.fixture(scope="module")
def halves(rc: RealCluster, on_dra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two half claims of node 0's GPU, running (after the whole-GPU test left it)."""
    node = rc.nodes[0]
    wait_for(
        "no claim left on node 0's GPU",
        lambda: (
            not any(
                (cl.get("status") or {}).get("allocation")
                for cl in rc.kube.json("get", "resourceclaims", "-A")["items"]
            )
        ),
        90,
        _diagnose(rc),
    )
    return _run_claimed(rc, HALVES, node)


def _token(rc: RealCluster, account: str, namespace: str, *extra: str) -> str:
    out: str = rc.kube.kubectl("create", "token", account, "-n", namespace, *extra).stdout
    return out.strip()


def _node_token(rc: RealCluster, node: str) -> str:
    """``--token=`` the node identity as the DaemonSet's pod on ``node`` has it: a token of
    the horus-node ServiceAccount bound to that pod (so it names the node)."""
    pod = _node_pod(rc, node)["metadata"]
    return "--token=" + _token(
        rc, c.NODE_SERVICE_ACCOUNT, NAMESPACE,
        "--bound-object-kind=Pod", f"--bound-object-name={pod['name']}",
        f"--bound-object-uid={pod['uid']}",
    )  # fmt: skip


def _direct_claim_namespaces(rc: RealCluster, *namespaces: str) -> None:
    """``helm upgrade --reuse-values`` setting gpuSharing.directClaimNamespaces (only the
    admission policy horus-claim-device-class reads it)."""
    from horus.devcluster.binaries import repo_root

    rc.kube.helm(
        "upgrade", RELEASE, str(repo_root() / "charts" / "horus"), "-n", NAMESPACE,
        "--reuse-values",
        "--set-json", f"gpuSharing.directClaimNamespaces={json.dumps(list(namespaces))}",
        "--wait", "--timeout", "120s", timeout=150,
    )  # fmt: skip


def test_the_dra_path_runs_the_driver_and_the_node_identity_writes_no_pod(
    rc: RealCluster, on_dra: dict[str, Any]
) -> None:
    node, other = rc.nodes[0], rc.nodes[1]
    ds = rc.kube.json("get", "daemonset", "horus-node", "-n", NAMESPACE)
    assert [x["name"] for x in ds["spec"]["template"]["spec"]["containers"]] == [
        "agent",
        "dra-driver",
    ]
    config = rc.kube.json("get", "configmap", "horus-config", "-n", NAMESPACE)
    settings = yaml.safe_load(config["data"]["config.yaml"])
    assert {settings[r]["placement_path"] for r in ("operator", "extender", "agent")} == {"dra"}
    # the node identity as the DaemonSet's pod on node 0 has it: a token bound to that pod
    pod = _node_pod(rc, node)["metadata"]
    token = _node_token(rc, node)
    theirs = next(
        s
        for s in rc.kube.json("get", "resourceslices")["items"]
        if s["spec"]["nodeName"] == other and s["spec"]["driver"] == c.DRA_DRIVER_NAME
    )
    forged = copy.deepcopy(theirs)
    forged["spec"]["devices"][0]["capacity"]["cores"]["value"] = "1000"
    refused = rc.kube.kubectl(token, "replace", "-f", "-", input=json.dumps(forged), check=False)
    assert refused.returncode != 0 and "horus-node-own-resourceslices" in refused.stderr, (
        refused.stderr
    )
    # a new slice for the other node, as that node's driver would publish it: only the node
    # rule refuses it (pool, device names and GPU identities are the other node's own)
    new = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "forged-" + other},
        "spec": theirs["spec"],
    }
    refused = rc.kube.kubectl(token, "create", "-f", "-", input=json.dumps(new), check=False)
    assert refused.returncode != 0 and "horus-node-own-resourceslices" in refused.stderr, (
        refused.stderr
    )
    refused = rc.kube.kubectl(
        token, "delete", "resourceslice", theirs["metadata"]["name"], check=False
    )
    assert refused.returncode != 0, refused.stdout
    # no pod write: not even an annotation of its own node's pod, nor a new pod
    for args in (
        ("annotate", "pod", pod["name"], "-n", NAMESPACE, "x=y"),
        ("label", "pod", pod["name"], "-n", NAMESPACE, "x=y"),
        ("run", "intruder", "-n", NAMESPACE, "--image=busybox", "--restart=Never"),
    ):
        refused = rc.kube.kubectl(token, *args, check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (
            args,
            refused.stderr,
        )
    for verb in ("patch", "update", "create"):
        can = rc.kube.kubectl(token, "auth", "can-i", verb, "pods", "-A", check=False)
        assert can.stdout.strip() == "no", verb
    assert (
        rc.kube.json("get", "resourceslice", theirs["metadata"]["name"])["spec"] == (theirs["spec"])
    )


def test_an_81559_mib_gpu_takes_a_whole_gpu_claim(rc: RealCluster, on_dra: dict[str, Any]) -> None:
    """A claim that names no capacity takes all of it: 100 % and all 81,559 MiB."""
    try:
        lines = _run_claimed(rc, {"dra-whole": (None, None)}, rc.nodes[0])
        env = lines["dra-whole"]["env"]
        assert (env[c.ENV_GPU_CORE_PERCENT], env[c.ENV_GPU_MEMORY_MIB]) == (
            "100",
            str(GPU_MEMORY_MIB),
        )
    finally:
        _delete(rc, "dra-whole")


def test_a_two_replica_dljob_runs_on_the_gpus_its_status_records(
    rc: RealCluster, on_dra: dict[str, Any]
) -> None:
    """The operator records the decision, then one claim per replica; the kube-scheduler
    allocates each on exactly the GPU in the DLJob's status and binds the pod; each
    container's environment (its own output) equals its claim's consumed capacity and
    device. 40,000 MiB each: two replicas cannot share one 81,559 MiB GPU (the job test_2
    may have left beside them takes 8,192 MiB of each), so they land on both nodes."""
    job = "dra-two"
    apply(rc, workload_job(job, 2, 20, 40000, ["--steps", "0", "--report-seconds", "1"]))
    try:
        pods = wait_for(
            f"{job}'s two containers running",
            lambda: (p := pods_of(rc, job)) and len(p) == 2 and all(map(running, p)) and p,
            240,
            _diagnose(rc, f"{job}-0", f"{job}-1"),
        )
        status = rc.kube.json("get", "dljob", job)["status"]
        records = {int(r["replica"]): r for r in status["placements"]}
        assert sorted(records) == [0, 1]
        assert {r["node"] for r in records.values()} == set(rc.nodes)
        claims = rc.kube.json("get", "resourceclaims", "-l", f"{c.LABEL_DLJOB_NAME}={job}")
        by_pod = {}
        for claim in claims["items"]:
            (pod_ref,) = claim["status"]["reservedFor"]
            by_pod[pod_ref["name"]] = claim
        assert len(by_pod) == 2
        for pod in pods:
            name = pod["metadata"]["name"]
            replica = int(pod["metadata"]["labels"][c.LABEL_REPLICA_INDEX])
            rec, claim = records[replica], by_pod[name]
            assert pod["spec"]["nodeName"] == rec["node"]
            pool, device, cores, memory = _consumed(claim)
            assert (pool, device) == (rec["node"], f"gpu-{rec['gpuIndex']}")
            assert (
                (cores, memory)
                == (int(rec["corePercent"]), int(rec["memoryMiB"]))
                == (
                    20,
                    40000,
                )
            )
            line = wait_for(
                f"{name}'s share line", lambda n=name: share_line(rc, n), 60, _diagnose(rc, name)
            )
            env = line["env"]
            assert env[c.ENV_GPU_UUID] == rec["gpuUUID"]
            assert env[c.ENV_GPU_INDEX] == str(rec["gpuIndex"])
            assert (env[c.ENV_GPU_CORE_PERCENT], env[c.ENV_GPU_MEMORY_MIB]) == ("20", "40000")
            assert env[c.ENV_CLAIM_UID] == claim["metadata"]["uid"]
            assert env[c.ENV_POD_NAME] == name
        listed = rc.kube.kubectl("get", "resourceclaims").stdout
        print(listed)
        assert all(n in listed for n in (cl["metadata"]["name"] for cl in by_pod.values()))
    finally:
        rc.kube.kubectl("delete", "dljob", job, "--wait=false", check=False)
        wait_for(
            f"{job}'s pods and claims gone",
            lambda: (
                not pods_of(rc, job)
                and not rc.kube.json("get", "resourceclaims", "-l", f"{c.LABEL_DLJOB_NAME}={job}")[
                    "items"
                ]
            ),
            120,
            _diagnose(rc),
        )


def test_a_deployments_pods_asking_horus_resources_run_with_the_claims_horus_made(
    rc: RealCluster, on_dra: dict[str, Any]
) -> None:
    """Pods a Deployment makes (only generateName) that ask horus.io/gpu-core / gpu-memory as
    on the device-plugin path: the chart's admission policy points them at the placeholder
    template, the operator makes each its claim horus-gpu-<pod UID> pinned to the GPU it
    chose, the kube-controller-manager records it in the pod's status, the kube-scheduler
    allocates it, and the kubelet's Prepare hands the container exactly that share (its own
    output)."""
    from horus.devcluster.binaries import repo_root
    from horus.devcluster.images import IMAGES, reference

    profile = (repo_root() / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()
    name = "dra-web"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {c.ANNOTATION_GRAPH_PROFILE: profile},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": reference(IMAGES["workload"].repository),
                            "imagePullPolicy": "Never",
                            "args": ["--steps", "0", "--report-seconds", "1"],
                            "resources": {
                                "limits": {c.RESOURCE_GPU_CORE: "20", c.RESOURCE_GPU_MEMORY: "64"}
                            },
                        }
                    ],
                },
            },
        },
    }
    apply(rc, deployment)

    def web() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = rc.kube.json("get", "pods", "-l", f"app={name}")["items"]
        return items

    try:
        pods = wait_for(
            f"{name}'s two containers running",
            lambda: (p := web()) and len(p) == 2 and all(map(running, p)) and p,
            240,
            _diagnose(rc),
        )
        for pod in pods:
            meta = pod["metadata"]
            assert meta["generateName"] == meta["name"][: len(meta["generateName"])]
            assert pod["spec"]["resourceClaims"] == [
                {"name": "horus-gpu", "resourceClaimTemplateName": c.CONVERTED_CLAIM_TEMPLATE}
            ]
            want = f"horus-gpu-{meta['uid']}"
            assert pod["status"]["resourceClaimStatuses"] == [
                {"name": "horus-gpu", "resourceClaimName": want}
            ]
            claim = rc.kube.json("get", "resourceclaim", want)
            assert claim["metadata"]["annotations"][c.ANNOTATION_CONVERTED_FOR] == meta["uid"]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [meta["uid"]]
            pool, device, cores, memory = _consumed(claim)
            assert (pool, cores, memory) == (pod["spec"]["nodeName"], 20, 64 * 256)
            (sel,) = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
            line = wait_for(
                f"{meta['name']}'s share line",
                lambda n=meta["name"]: share_line(rc, n),
                60,
                _diagnose(rc, meta["name"]),
            )
            env = line["env"]
            assert env[c.ENV_GPU_UUID] in sel["cel"]["expression"]  # the GPU Horus pinned
            assert env[c.ENV_GPU_INDEX] == device.removeprefix("gpu-")
            assert (env[c.ENV_GPU_CORE_PERCENT], env[c.ENV_GPU_MEMORY_MIB]) == ("20", "16384")
            assert (env[c.ENV_CLAIM_UID], env[c.ENV_POD_NAME]) == (
                claim["metadata"]["uid"],
                meta["name"],
            )
    finally:
        rc.kube.kubectl("delete", "deployment", name, "--wait=false", check=False)
        wait_for(
            f"{name}'s pods and claims gone",
            lambda: (
                not web()
                and not [
                    cl
                    for cl in rc.kube.json("get", "resourceclaims")["items"]
                    if cl["metadata"]["name"].startswith("horus-gpu-")
                ]
            ),
            120,
            _diagnose(rc),
        )


def test_twin_halves_of_an_81559_mib_gpu_each_get_their_own_share(
    rc: RealCluster, halves: dict[str, dict[str, Any]]
) -> None:
    a, b = (halves[n]["env"] for n in HALVES)
    assert (a[c.ENV_GPU_CORE_PERCENT], b[c.ENV_GPU_CORE_PERCENT]) == ("50", "50")
    assert (a[c.ENV_GPU_MEMORY_MIB], b[c.ENV_GPU_MEMORY_MIB]) == (
        str(HALF),
        str(GPU_MEMORY_MIB - HALF),
    )
    assert a[c.ENV_CLAIM_UID] != b[c.ENV_CLAIM_UID] and a[c.ENV_SHARE_ID] != b[c.ENV_SHARE_ID]


def _agent_limits(rc: RealCluster, node: str) -> dict[str, float]:
    """horus_pod_gpu_memory_limit_bytes by pod, from node's agent (apiserver pod proxy)."""
    pod = _node_pod(rc, node)["metadata"]["name"]
    port = _values(rc).get("metrics", {}).get("agentPort", 9402)
    out = rc.kube.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:{port}/proxy/metrics",
        check=False,
    ).stdout  # fmt: skip
    limits = {}
    for line in out.splitlines():
        if line.startswith(c.METRIC_POD_GPU_MEMORY_LIMIT + "{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('pod="', 1)[1].split('"', 1)[0]
            limits[name] = float(value)
    return limits


def test_the_agent_enforces_the_shares_of_the_claims(
    rc: RealCluster, halves: dict[str, dict[str, Any]]
) -> None:
    want = {name: float(int(mem[:-2]) * c.MIB) for name, (_, mem) in HALVES.items()}
    got = wait_for(
        "the agent's memory limits of the halves",
        lambda: (lim := _agent_limits(rc, rc.nodes[0])) and lim == want and lim,
        60,
        lambda: json.dumps(_agent_limits(rc, rc.nodes[0])) + _diagnose(rc)(),
    )
    assert got == want


def test_a_tenants_claim_that_would_over_commit_stays_unallocated_with_the_reason(
    rc: RealCluster, halves: dict[str, dict[str, Any]]
) -> None:
    """A tenant bypasses Horus with a claim of their own on the GPU the halves fill: the
    kube-scheduler — the one allocator of every share — leaves it unallocated and says why."""
    rc.kube.kubectl("create", "namespace", TENANT_NS, check=False)
    rc.kube.kubectl("create", "serviceaccount", "tenant", "-n", TENANT_NS, check=False)
    rc.kube.kubectl(
        "create", "rolebinding", "tenant-edit", "--clusterrole=edit",
        f"--serviceaccount={TENANT_NS}:tenant", "-n", TENANT_NS, check=False,
    )  # fmt: skip
    token = "--token=" + _token(rc, "tenant", TENANT_NS)
    claim_doc, pod_doc = claim_and_pod("over-commit", rc.nodes[0], "10", "1024Mi", TENANT_NS)
    # a direct claim of the Horus DeviceClass is the cluster admin's choice: refused until the
    # namespace is listed in gpuSharing.directClaimNamespaces
    denied = rc.kube.kubectl(token, "create", "-f", "-", input=json.dumps(claim_doc), check=False)
    assert denied.returncode != 0 and "horus-claim-device-class" in denied.stderr, denied.stderr
    _direct_claim_namespaces(rc, TENANT_NS)
    try:

        def admitted() -> bool:
            dry = rc.kube.kubectl(
                token, "create", "--dry-run=server", "-f", "-", input=json.dumps(claim_doc),
                check=False,
            )  # fmt: skip
            return dry.returncode == 0

        wait_for("the tenant's claim admitted", admitted, 30, _diagnose(rc))
        for doc in (claim_doc, pod_doc):
            rc.kube.kubectl(token, "apply", "-f", "-", input=json.dumps(doc))
    finally:
        _direct_claim_namespaces(rc)

    def refused() -> str:
        pod = rc.kube.json("get", "pod", "over-commit", "-n", TENANT_NS)
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return str(cond.get("message", ""))
        return ""

    message = wait_for("the scheduler's reason", refused, 60, _diagnose(rc, "over-commit"))
    assert "cannot allocate all claims" in message, message
    claim = rc.kube.json("get", "resourceclaim", "over-commit", "-n", TENANT_NS)
    assert not (claim.get("status") or {}).get("allocation")
    for name, (cores, mem) in HALVES.items():
        still = _consumed(rc.kube.json("get", "resourceclaim", name))
        assert still[2:] == (int(cores), int(mem[:-2]))
        assert running(rc.kube.json("get", "pod", name))


def test_a_tenant_with_edit_cannot_change_an_allocation_or_what_prepare_hands_out(
    rc: RealCluster, halves: dict[str, dict[str, Any]]
) -> None:
    """As an editor of the halves' namespace: the claim's status (the allocation Prepare and
    the agent read) is refused, its spec is immutable, and horus.io/gpu-assignment written
    on the pod (what the device plugin path read) changes nothing on this path."""
    rc.kube.kubectl("create", "serviceaccount", "editor", "-n", "default", check=False)
    rc.kube.kubectl(
        "create", "rolebinding", "editor-edit", "--clusterrole=edit",
        "--serviceaccount=default:editor", "-n", "default", check=False,
    )  # fmt: skip
    token = "--token=" + _token(rc, "editor", "default")
    name = "dra-half-a"
    claim = rc.kube.json("get", "resourceclaim", name)
    before = _consumed(claim)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    forged = {**result, "consumedCapacity": {"cores": "100", "memory": f"{GPU_MEMORY_MIB}Mi"}}
    patch = {"status": {"allocation": {"devices": {"results": [forged]}}}}
    refused = rc.kube.kubectl(
        token, "patch", "resourceclaim", name, "--subresource=status", "--type=merge",
        "-p", json.dumps(patch), check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    spec = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": c.DRA_DEVICE_CLASS,
        "capacity": {"requests": {"cores": "100", "memory": f"{GPU_MEMORY_MIB}Mi"}},
    }}]}}}  # fmt: skip
    refused = rc.kube.kubectl(
        token, "patch", "resourceclaim", name, "--type=merge", "-p", json.dumps(spec),
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "immutable" in refused.stderr, refused.stderr
    # an assignment annotation on the pod: refused by Horus' policy, or written and ignored
    whole = GpuAssignment(rc.nodes[0], "GPU-forged", 0, 100, GPU_MEMORY_MIB)
    rc.kube.kubectl(
        token, "annotate", "pod", name, "--overwrite",
        f"{c.ANNOTATION_GPU_ASSIGNMENT}={encode_assignment(whole)}", check=False,
    )  # fmt: skip
    assert _consumed(rc.kube.json("get", "resourceclaim", name)) == before
    limits = wait_for(
        "the agent's limits after the tenant's writes",
        lambda: _agent_limits(rc, rc.nodes[0]) or None,
        30,
        _diagnose(rc),
    )
    assert limits[name] == before[3] * c.MIB  # the claim's, not the annotation's
    pod = rc.kube.json("get", "pod", name)
    assert running(pod) and pod["status"]["containerStatuses"][0]["restartCount"] == 0


def _horus_slices(rc: RealCluster) -> list[dict[str, Any]]:
    return [
        s
        for s in rc.kube.json("get", "resourceslices")["items"]
        if s["spec"].get("driver") == c.DRA_DRIVER_NAME
    ]


def _uuids(slice_: dict[str, Any]) -> list[str]:
    return [str(d["attributes"]["uuid"]["string"]) for d in slice_["spec"].get("devices") or []]


def test_a_node_cannot_publish_another_pool_or_another_nodes_gpu(
    rc: RealCluster, halves: dict[str, dict[str, Any]]
) -> None:
    """Node A's own pod-bound token, writing a slice for its own node (which the node rule
    lets it): one whose pool is named after node B, and one whose device carries the UUID
    the operator registered to B in the GPU identity registry, are both refused by
    horus-gpu-slices-own-gpus, in a new slice and in A's own; every Horus slice stays its
    node's own."""
    a, b = rc.nodes[0], rc.nodes[1]
    ours = next(s for s in _horus_slices(rc) if s["spec"]["nodeName"] == a)
    theirs = next(s for s in _horus_slices(rc) if s["spec"]["nodeName"] == b)
    (uuid_b,) = _uuids(theirs)

    def registry() -> dict[str, str]:
        cm = rc.kube.json("get", "configmap", "horus-gpu-identities", "-n", NAMESPACE)
        data: dict[str, str] = cm.get("data") or {}
        return data

    wait_for(
        f"{uuid_b} registered to {b}",
        lambda: registry().get(uuid_b) == b,
        60,
        lambda: json.dumps(registry()),
    )
    token = _node_token(rc, a)
    other_pool = copy.deepcopy(ours["spec"])
    other_pool["pool"] = {"name": b, "generation": 1, "resourceSliceCount": 1}
    b_gpu = copy.deepcopy(ours["spec"])
    b_gpu["pool"] = {"name": a, "generation": 1, "resourceSliceCount": 1}
    b_gpu["devices"] = copy.deepcopy(theirs["spec"]["devices"])
    created = []
    try:
        for name, spec, says in (
            ("forged-pool-" + a, other_pool, f"with pool {b}"),
            ("forged-uuid-" + a, b_gpu, f"{uuid_b} is registered to node {b}"),
        ):
            assert spec["nodeName"] == a and spec["driver"] == c.DRA_DRIVER_NAME
            doc = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": spec,
            }
            refused = rc.kube.kubectl(
                token, "create", "-f", "-", input=json.dumps(doc), check=False
            )
            if refused.returncode == 0:
                created.append(name)
            assert refused.returncode != 0, name
            assert "horus-gpu-slices-own-gpus" in refused.stderr and says in refused.stderr, (
                refused.stderr
            )
        # A's own slice rewritten to carry B's GPU: refused the same way
        current = next(
            s for s in _horus_slices(rc) if s["metadata"]["name"] == ours["metadata"]["name"]
        )
        rewritten = copy.deepcopy(current)
        rewritten["spec"]["devices"][0]["attributes"]["uuid"]["string"] = uuid_b
        refused = rc.kube.kubectl(
            token, "replace", "-f", "-", input=json.dumps(rewritten), check=False
        )
        assert refused.returncode != 0 and f"{uuid_b} is registered to node {b}" in (
            refused.stderr
        ), refused.stderr
        for s in _horus_slices(rc):
            assert s["spec"]["pool"]["name"] == s["spec"]["nodeName"], s["metadata"]["name"]
            if s["spec"]["nodeName"] != b:
                assert uuid_b not in _uuids(s), s["metadata"]["name"]
    finally:
        for name in created:
            rc.kube.kubectl("delete", "resourceslice", name, check=False)


@pytest.fixture(scope="module")
def on_b(rc: RealCluster, halves: dict[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A one-replica DLJob whose share fits only node B's GPU (the halves fill node A's),
    running; yields its pod."""
    job = "dra-on-b"
    apply(rc, workload_job(job, 1, 20, 40000, ["--steps", "0", "--report-seconds", "1"]))
    try:
        (pod,) = wait_for(
            f"{job}'s container running",
            lambda: (p := pods_of(rc, job)) and len(p) == 1 and all(map(running, p)) and p,
            240,
            _diagnose(rc, f"{job}-0"),
        )
        yield pod
    finally:
        rc.kube.kubectl("delete", "dljob", job, "--wait=false", check=False)
        wait_for(
            f"{job}'s pods and claims gone",
            lambda: (
                not pods_of(rc, job)
                and not rc.kube.json("get", "resourceclaims", "-l", f"{c.LABEL_DLJOB_NAME}={job}")[
                    "items"
                ]
            ),
            120,
            _diagnose(rc),
        )


def test_node_b_stays_in_horus_view_and_its_replica_is_pinned_there(
    rc: RealCluster, on_b: dict[str, Any]
) -> None:
    """After node A's forged slices, Horus still places on B: the DLJob's record names B's
    GPU, its pod runs on B, and the pod Horus made requires B by name (a device with B's
    UUID published elsewhere cannot attract it)."""
    b = rc.nodes[1]
    (uuid_b,) = _uuids(next(s for s in _horus_slices(rc) if s["spec"]["nodeName"] == b))
    (record,) = rc.kube.json("get", "dljob", "dra-on-b")["status"]["placements"]
    assert (record["node"], record["gpuUUID"]) == (b, uuid_b)
    assert on_b["spec"]["nodeName"] == b
    required = on_b["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    terms = required["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": [b]}
    assert terms and all(pin in (t.get("matchFields") or []) for t in terms), terms
    line = wait_for(
        "dra-on-b-0's share line",
        lambda: share_line(rc, on_b["metadata"]["name"]),
        60,
        _diagnose(rc, on_b["metadata"]["name"]),
    )
    assert line["env"][c.ENV_GPU_UUID] == uuid_b


def test_a_tenant_with_edit_cannot_remove_or_add_horus_annotations_of_its_running_pod(
    rc: RealCluster, on_b: dict[str, Any]
) -> None:
    """As an editor of the job's namespace: removing the assignment from the running replica
    pod, removing or adding its signature, and removing the signed share from the replica's
    claim are each refused, and the pod and its claim keep what Horus wrote."""
    rc.kube.kubectl("create", "serviceaccount", "editor", "-n", "default", check=False)
    rc.kube.kubectl(
        "create", "rolebinding", "editor-edit", "--clusterrole=edit",
        "--serviceaccount=default:editor", "-n", "default", check=False,
    )  # fmt: skip
    token = "--token=" + _token(rc, "editor", "default")
    name = on_b["metadata"]["name"]
    before = rc.kube.json("get", "pod", name)["metadata"]["annotations"]
    assert c.ANNOTATION_GPU_ASSIGNMENT in before
    writes = [(f"{c.ANNOTATION_GPU_ASSIGNMENT}-", "horus-pod-annotations")]
    if c.ANNOTATION_ASSIGNMENT_SIGNATURE in before:
        writes.append((f"{c.ANNOTATION_ASSIGNMENT_SIGNATURE}-", "horus-pod-annotations"))
    else:
        writes.append((f"{c.ANNOTATION_ASSIGNMENT_SIGNATURE}=forged", "horus-pod-annotations"))
    for write, policy in writes:
        refused = rc.kube.kubectl(token, "annotate", "pod", name, "--overwrite", write, check=False)
        assert refused.returncode != 0 and policy in refused.stderr, (write, refused.stderr)
    (claim,) = rc.kube.json("get", "resourceclaims", "-l", f"{c.LABEL_DLJOB_NAME}=dra-on-b")[
        "items"
    ]
    signed = claim["metadata"]["annotations"]
    assert {c.ANNOTATION_GPU_ASSIGNMENT, c.ANNOTATION_ASSIGNMENT_SIGNATURE} <= set(signed)
    for key in (c.ANNOTATION_ASSIGNMENT_SIGNATURE, c.ANNOTATION_GPU_ASSIGNMENT):
        refused = rc.kube.kubectl(
            token, "annotate", "resourceclaim", claim["metadata"]["name"], f"{key}-", check=False
        )
        assert refused.returncode != 0 and "horus-claim-annotations" in refused.stderr, (
            key,
            refused.stderr,
        )
    pod = rc.kube.json("get", "pod", name)
    assert running(pod) and pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert {
        k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith("horus.io/")
    } == {k: v for k, v in before.items() if k.startswith("horus.io/")}
    after = rc.kube.json("get", "resourceclaim", claim["metadata"]["name"])
    assert after["metadata"]["annotations"] == signed
