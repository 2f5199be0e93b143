"""The DRA driver against the real apiserver and kube-scheduler (kwok node, simulated GPUs).

What is real here: the ResourceSlice the driver publishes with the node identity's token
(RBAC and admission policies as shipped), the DeviceClass, the kube-scheduler allocating
ResourceClaims against the slice (consumable capacity: ``consumedCapacity``, ``shareID``), and
the driver reading those claims back at ``NodePrepareResources`` — called over its real socket
by a kubelet-side peer, since a kwok node has no kubelet.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from dra_cluster_support import GPU_MIB, ROOT, DraEnv, RunningDriver, token_api

from horus.api.inventory import simulated_gpu_uuid
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.dra.app import run_driver


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def claim_and_pod(env: DraEnv, name: str, gpu: int, cores: str | None, memory: str | None) -> None:
    """A claim pinned to GPU ``gpu`` of the node by its UUID, and a pod that uses it."""
    capacity: dict[str, str] = {}
    if cores is not None:
        capacity["cores"] = cores
    if memory is not None:
        capacity["memory"] = memory
    uuid_ = simulated_gpu_uuid(env.node, gpu)
    exactly: dict[str, Any] = {
        "deviceClassName": c.DRA_DEVICE_CLASS,
        "selectors": [
            {"cel": {"expression": f'device.attributes["{c.DRA_DRIVER_NAME}"].uuid == "{uuid_}"'}}
        ],
    }
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    env.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": env.namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
    )
    env.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": env.namespace},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": env.node},
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            },
        }
    )


def allocated(env: DraEnv, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        claim = env.get("resourceclaim", name)
        return claim if (claim.get("status") or {}).get("allocation") else None

    out: dict[str, Any] = wait_for(f"claim {name} allocated", probe)
    return out


def remove(env: DraEnv, *names: str) -> None:
    for name in names:
        env.kubectl(
            "delete", "pod", name, "-n", env.namespace, "--grace-period=0", "--force", check=False
        )
        env.kubectl(
            "delete", "resourceclaim", name, "-n", env.namespace, "--wait=true", check=False
        )


def consumed(result: dict[str, Any]) -> tuple[int, int]:
    """(cores, MiB) a result consumed, whatever canonical form the apiserver wrote."""
    cap = result["consumedCapacity"]
    return (
        parse_quantity(cap["cores"], "cores"),
        parse_quantity(cap["memory"], "memory") // c.MIB,
    )


def spec_env(driver: RunningDriver, uid: str) -> dict[str, str]:
    spec = json.loads((driver.settings.cdi_dir / f"horus.io-gpu_{uid}.json").read_text())
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def test_the_slice_is_the_contract_and_the_apiserver_keeps_it(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    (live,) = wait_for("the node's ResourceSlice", dra_env.slices)
    spec = live["spec"]
    assert spec["pool"]["name"] == dra_env.node and spec["driver"] == c.DRA_DRIVER_NAME
    owner = live["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", dra_env.node)
    gpu0 = spec["devices"][0]
    assert gpu0["name"] == "gpu-0"
    assert gpu0["attributes"]["uuid"] == {"string": simulated_gpu_uuid(dra_env.node, 0)}
    assert gpu0["attributes"]["memoryMiB"] == {"int": GPU_MIB}
    # kept by the apiserver, i.e. DRAConsumableCapacity is on: the fields are not dropped
    assert gpu0["allowMultipleAllocations"] is True
    assert gpu0["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Mi"
    assert gpu0["capacity"]["cores"]["value"] == "100"


def test_two_claims_share_a_gpu_each_prepared_with_its_own_consumed_capacity(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    claim_and_pod(dra_env, "twin-a", 0, "40", "16384Mi")
    claim_and_pod(dra_env, "twin-b", 0, "40", "8192Mi")  # twins: same cores, other memory
    claims = {n: allocated(dra_env, n) for n in ("twin-a", "twin-b")}
    results = {n: cl["status"]["allocation"]["devices"]["results"][0] for n, cl in claims.items()}
    assert {r["device"] for r in results.values()} == {"gpu-0"}
    assert results["twin-a"]["shareID"] != results["twin-b"]["shareID"]
    # a third that would pass the GPU's cores stays unallocated: the scheduler holds capacity
    claim_and_pod(dra_env, "over", 0, "40", "1024Mi")
    time.sleep(5)
    assert not (dra_env.get("resourceclaim", "over").get("status") or {}).get("allocation")
    pod = dra_env.get("pod", "over")
    reasons = json.dumps(pod["status"].get("conditions", []))
    # the kube-scheduler's own reason, as a tenant sees it on the pod
    assert "Unschedulable" in reasons and "cannot allocate all claims" in reasons, reasons
    refs = [(dra_env.namespace, n, claims[n]["metadata"]["uid"]) for n in ("twin-a", "twin-b")]
    out = driver.kubelet.prepare(*refs).claims
    for _ns, name, uid in refs:
        assert out[uid].error == "", out[uid].error
        (device,) = out[uid].devices
        cores, memory_mib = consumed(results[name])
        assert device.device_name == "gpu-0" and device.share_id == results[name]["shareID"]
        assert list(device.cdi_device_ids) == [f"horus.io/gpu={uid}"]
        env = spec_env(driver, uid)
        assert env[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == str(cores) == "40"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory_mib}M"
        assert env[c.ENV_GPU_UUID] == simulated_gpu_uuid(dra_env.node, 0)
        assert (env[c.ENV_CLAIM_NAME], env[c.ENV_POD_NAME]) == (name, name)
        assert env[c.ENV_SHARE_ID] == results[name]["shareID"]
    assert {spec_env(driver, u)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] for _, _, u in refs} == {
        "0=16384M",
        "0=8192M",
    }
    # idempotent, then undone
    assert driver.kubelet.prepare(*refs).claims == out
    unprepared = driver.kubelet.unprepare(*refs).claims
    assert all(unprepared[u].error == "" for _, _, u in refs)
    assert list(driver.settings.cdi_dir.iterdir()) == []
    remove(dra_env, "twin-a", "twin-b", "over")


def test_81559_mib_takes_a_whole_gpu_job_then_two_half_jobs(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    claim_and_pod(dra_env, "whole", 1, None, None)  # says nothing: the whole GPU
    whole = allocated(dra_env, "whole")["status"]["allocation"]["devices"]["results"][0]
    assert whole["device"] == "gpu-1"
    assert consumed(whole) == (100, GPU_MIB)
    uid = dra_env.get("resourceclaim", "whole")["metadata"]["uid"]
    assert driver.kubelet.prepare((dra_env.namespace, "whole", uid)).claims[uid].error == ""
    assert spec_env(driver, uid)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={GPU_MIB}M"
    driver.kubelet.unprepare((dra_env.namespace, "whole", uid))
    remove(dra_env, "whole")
    half = f"{GPU_MIB // 2}Mi"
    claim_and_pod(dra_env, "half-a", 1, "50", half)
    claim_and_pod(dra_env, "half-b", 1, "50", half)
    for name in ("half-a", "half-b"):
        result = allocated(dra_env, name)["status"]["allocation"]["devices"]["results"][0]
        assert result["device"] == "gpu-1"
        assert consumed(result) == (50, GPU_MIB // 2)
    remove(dra_env, "half-a", "half-b")


def test_an_unhealthy_gpu_is_tainted_and_gets_no_new_claim(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    driver.health.write_text(json.dumps({"1": "Unhealthy"}))
    try:

        def tainted() -> bool:
            slices = dra_env.slices()
            return bool(slices) and bool(slices[0]["spec"]["devices"][1].get("taints"))

        wait_for("the taint on gpu-1", tainted)
        taint = dra_env.slices()[0]["spec"]["devices"][1]["taints"][0]
        assert (taint["key"], taint["effect"]) == (c.DRA_TAINT_UNHEALTHY, "NoSchedule")
        claim_and_pod(dra_env, "on-sick", 1, "10", "1024Mi")
        time.sleep(5)
        assert not (dra_env.get("resourceclaim", "on-sick").get("status") or {}).get("allocation")
    finally:
        driver.health.write_text("{}")
        remove(dra_env, "on-sick")
    wait_for(
        "the taint removed", lambda: not dra_env.slices()[0]["spec"]["devices"][1].get("taints")
    )


def test_the_node_identity_writes_only_its_own_nodes_slices(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    other = f"elsewhere-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{other}-forged"},
        "spec": {
            "driver": c.DRA_DRIVER_NAME,
            "nodeName": other,
            "pool": {"name": other, "generation": 1, "resourceSliceCount": 1},
            # a well-formed device, so only the node rule can refuse it
            "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": f"GPU-{other}"}}}],
        },
    }
    token = f"--token={dra_env.node_token}"
    refused = dra_env.kubectl(token, "create", "-f", "-", check=False, input=json.dumps(body))
    assert refused.returncode != 0 and "horus-node-own-resourceslices" in refused.stderr, (
        refused.stderr
    )
    # nor may it take over the driver name of another vendor on its own node
    body["spec"] = {**body["spec"], "nodeName": dra_env.node, "driver": "gpu.example.com"}
    body["spec"]["pool"] = {"name": dra_env.node, "generation": 1, "resourceSliceCount": 1}
    refused = dra_env.kubectl(token, "create", "-f", "-", check=False, input=json.dumps(body))
    assert refused.returncode != 0 and "horus-node-own-resourceslices" in refused.stderr, (
        refused.stderr
    )


def test_a_tenant_with_edit_cannot_change_an_allocation(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    """The allocation Prepare reads is in the claim's status: a namespace editor (Kubernetes'
    edit role) may make claims but not write their status, so it cannot change what the
    driver hands out; the attempt is refused."""
    ns = dra_env.namespace
    dra_env.kubectl("create", "serviceaccount", "tenant", "-n", ns)
    dra_env.kubectl(
        "create", "rolebinding", "tenant-edit", "--clusterrole=edit",
        f"--serviceaccount={ns}:tenant", "-n", ns,
    )  # fmt: skip
    token = dra_env.kubectl("create", "token", "tenant", "-n", ns).stdout.strip()
    claim_and_pod(dra_env, "tenant-claim", 0, "10", "1024Mi")
    result = allocated(dra_env, "tenant-claim")["status"]["allocation"]["devices"]["results"][0]
    forged = json.loads(json.dumps(result))
    forged["consumedCapacity"] = {"cores": "100", "memory": f"{GPU_MIB}Mi"}
    patch = {"status": {"allocation": {"devices": {"results": [forged]}}}}
    refused = dra_env.kubectl(
        f"--token={token}", "patch", "resourceclaim", "tenant-claim", "-n", ns,
        "--subresource=status", "--type=merge", "-p", json.dumps(patch), check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    after = dra_env.get("resourceclaim", "tenant-claim")["status"]["allocation"]
    assert consumed(after["devices"]["results"][0]) == (10, 1024)
    # ("resourceclaims/status" would name a claim called status: the subresource is a flag)
    can = dra_env.kubectl(
        f"--token={token}", "auth", "can-i", "update", "resourceclaims", "--subresource=status",
        "-n", ns, check=False,
    )  # fmt: skip
    assert can.stdout.strip() == "no"
    remove(dra_env, "tenant-claim")


def test_prepared_claims_survive_a_driver_restart(dra_env: DraEnv, driver: RunningDriver) -> None:
    claim_and_pod(dra_env, "kept", 0, "20", "2048Mi")
    allocated(dra_env, "kept")
    uid = dra_env.get("resourceclaim", "kept")["metadata"]["uid"]
    ref = (dra_env.namespace, "kept", uid)
    first = driver.kubelet.prepare(ref).claims[uid]
    assert first.error == ""
    driver.stop.set()
    driver.thread.join(10)
    driver.stop.clear()
    thread = threading.Thread(
        target=run_driver,
        args=(driver.settings, driver.stop, token_api(dra_env.cluster, dra_env.node_token)),
        daemon=True,
    )
    thread.start()
    driver.thread = thread
    driver.kubelet.register(timeout=30)
    assert driver.kubelet.prepare(ref).claims[uid] == first
    assert driver.kubelet.unprepare(ref).claims[uid].error == ""
    remove(dra_env, "kept")


def test_the_documented_template_gives_a_plain_pod_its_share(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    import yaml

    docs = list(
        yaml.safe_load_all((ROOT / "examples" / "dra" / "plain-pod-share.yaml").read_text())
    )
    template, pod = docs
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": dra_env.node}
    env_ns = dra_env.namespace
    dra_env.kubectl("apply", "-n", env_ns, "-f", "-", input=json.dumps(template))
    dra_env.kubectl("apply", "-n", env_ns, "-f", "-", input=json.dumps(pod))

    def claim_name() -> str:
        live = dra_env.get("pod", pod["metadata"]["name"])
        for status in (live.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("resourceClaimName"):
                return str(status["resourceClaimName"])
        return ""

    name = wait_for("the claim made from the template", claim_name)
    claim = allocated(dra_env, name)
    result = claim["status"]["allocation"]["devices"]["results"][0]
    assert consumed(result) == (40, 16384)
    uid = claim["metadata"]["uid"]
    out = driver.kubelet.prepare((env_ns, name, uid)).claims[uid]
    assert out.error == "", out.error
    env = spec_env(driver, uid)
    assert env[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=16384M"
    assert env[c.ENV_POD_NAME] == pod["metadata"]["name"]
    driver.kubelet.unprepare((env_ns, name, uid))
    dra_env.kubectl(
        "delete",
        "pod",
        pod["metadata"]["name"],
        "-n",
        env_ns,
        "--grace-period=0",
        "--force",
        check=False,
    )


def test_a_claim_built_from_a_placement_is_allocated_on_exactly_that_gpu(
    dra_env: DraEnv, driver: RunningDriver
) -> None:
    """issue 25 item 3's building block: the operator's claim (horus.operator.claim_manifests) for a
    replica placed on gpu-1 is allocated by the kube-scheduler on gpu-1 with the share."""
    from horus.operator.claim_manifests import replica_claim, use_claim
    from horus.operator.podspec import placement_record

    class Gpu:
        gpu_uuid = simulated_gpu_uuid(dra_env.node, 1)
        gpu_index, core_percent, memory_mib = 1, 35, 12000

    job = {"metadata": {"name": "placed", "namespace": dra_env.namespace, "uid": "x"}}
    claim = replica_claim(job, 0, [placement_record(0, "placed-0", dra_env.node, Gpu())])
    claim["metadata"].pop("ownerReferences")  # no DLJob here: the GC would delete it
    dra_env.apply(claim)
    pod = use_claim(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "placed-0", "namespace": dra_env.namespace},
            "spec": {
                "schedulerName": c.SCHEDULER_NAME,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
        claim["metadata"]["name"],
    )
    dra_env.apply(pod)
    result = allocated(dra_env, claim["metadata"]["name"])["status"]["allocation"]["devices"][
        "results"
    ][0]
    assert (result["pool"], result["device"]) == (dra_env.node, "gpu-1")
    assert consumed(result) == (35, 12000)
    remove(dra_env, "placed-0")
    dra_env.kubectl(
        "delete", "resourceclaim", claim["metadata"]["name"], "-n", dra_env.namespace, check=False
    )
