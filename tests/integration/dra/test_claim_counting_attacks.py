"""What Horus counts cannot be chosen by a tenant, on a real apiserver and kube-scheduler.

Each test plays a tenant who makes ResourceClaims of the ``gpu.horus.io`` class directly (the
allocation is the real kube-scheduler's) against DLJobs Horus places (the real operator pass,
``Reconciler(placement_path="dra")``, fixtures of test_operator_claims.py): a whole-GPU claim
naming one of its own DLJobs as controller, a claim with two requests on one GPU, an
``adminAccess`` claim, and claims made in a loop against each new decision. Each is counted
(or refused by the apiserver), no other job's pod is deleted, and a job that fits elsewhere
runs (docs/dra.md, "What Horus counts").
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import test_operator_claims as operator_claims
from dra_cluster_support import DraEnv
from test_dra_cluster import wait_for
from test_operator_claims import Scoped, assert_never_over, dljob, passes_until, status

from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.operator.livestate import build_live_state
from horus.operator.reconcile import Reconciler
from signing_keys import KEY

# the operator pass on the test's namespace and node, as in test_operator_claims.py
crd = operator_claims.crd
placer = operator_claims.placer


def tenant_claim(
    env: DraEnv,
    name: str,
    requests: list[dict[str, Any]],
    owner: dict[str, Any] | None = None,
    pod: bool = True,
) -> Any:
    """The tenant's claim and (``pod``) a pod using it; the kubectl result of the claim."""
    meta: dict[str, Any] = {"name": name, "namespace": env.namespace}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": requests}},
    }
    made = env.kubectl("create", "-f", "-", check=False, input=json.dumps(claim))
    if made.returncode or not pod:
        return made
    env.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": env.namespace},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"claims": [{"name": "share"}]},
                    }
                ],
                "resourceClaims": [{"name": "share", "resourceClaimName": name}],
            },
        }
    )
    return made


def request(
    name: str, uuid: str | None = None, cores: int | None = None, **extra: Any
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": c.DRA_DEVICE_CLASS, **extra}
    if uuid is not None:
        cel = f'device.attributes["{c.DRA_DRIVER_NAME}"].{c.DRA_ATTR_UUID} == "{uuid}"'
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    if cores is not None:
        exactly["capacity"] = {"requests": {"cores": str(cores), "memory": "1000Mi"}}
    return {"name": name, "exactly": exactly}


def allocation(env: DraEnv, name: str) -> list[dict[str, Any]]:
    """The claim's allocated results, once the kube-scheduler allocated it."""

    def results() -> list[dict[str, Any]] | None:
        alloc = (env.get("resourceclaim", name).get("status") or {}).get("allocation")
        return list(alloc["devices"]["results"]) if alloc else None

    try:
        got: list[dict[str, Any]] = wait_for(f"claim {name} allocated", results, 60)
    except AssertionError as exc:
        pod = env.kubectl("get", "pod", name, "-n", env.namespace, "-o", "json", check=False)
        conds = json.loads(pod.stdout or "{}").get("status", {}).get("conditions")
        raise AssertionError(f"{exc}; pod {name}: {conds}") from None
    return got


def running(env: DraEnv, rec: Reconciler, job: str) -> dict[str, Any]:
    """Passes until ``job`` runs; its one placement."""
    passes_until(rec, f"{job} Running", lambda: status(env, job).get("phase") == "Running", 120)
    placed: dict[str, Any] = status(env, job)["placements"][0]
    return placed


def pod_uid(env: DraEnv, name: str) -> str:
    return str(env.get("pod", name)["metadata"]["uid"])


def horus_core(api: Scoped, env: DraEnv, index: int) -> int:
    """The cores Horus counts on ``index`` of the test's node (its own live state)."""
    live = build_live_state(
        api.list_nodes(),
        api.list_pods(),
        api.list_dljobs(),
        keys=KEY,
        claims=api.list_resource_claims(),
        slices=env.slices(),
    )
    return int(live.state.core_used[live.state.gpu_id(env.node, index)])


def test_a_tenant_claim_naming_its_own_dljob_as_owner_is_counted(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    api, rec = placer
    dra_env.apply(dljob(dra_env.namespace, "small", replicas=1, core=10, mib=1000))
    small = running(dra_env, rec, "small")
    small_pod = pod_uid(dra_env, "small-0")
    dra_env.apply(dljob(dra_env.namespace, "o", replicas=1, core=95, mib=1000))
    o = running(dra_env, rec, "o")
    assert o["gpuIndex"] != small["gpuIndex"]  # 10 % + 95 % do not fit one GPU
    owner = {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "name": "small",
        "uid": dra_env.get("dljob", "small")["metadata"]["uid"],
        "controller": True,
    }
    # 80 % of the small job's own GPU, "controlled" by the small job: not Horus' claim
    uuid = simulated_gpu_uuid(dra_env.node, small["gpuIndex"])
    assert not tenant_claim(dra_env, "forged", [request("gpu", uuid, 80)], owner).returncode
    (got,) = allocation(dra_env, "forged")
    assert got["device"] == f"gpu-{small['gpuIndex']}"
    assert horus_core(api, dra_env, small["gpuIndex"]) == 90  # counted, whoever it names
    # a 50 % job has room nowhere: queued, never decided onto the GPU the tenant holds
    dra_env.apply(dljob(dra_env.namespace, "mid", replicas=1, core=50, mib=8000))
    for _ in range(4):
        rec.run_pass()
        assert not status(dra_env, "mid").get("placements")
    # once the 95 % job is gone, it fits elsewhere: placed there and runs
    dra_env.kubectl("delete", "dljob", "o", "-n", dra_env.namespace)
    mid = running(dra_env, rec, "mid")
    assert mid["gpuIndex"] == o["gpuIndex"]
    assert pod_uid(dra_env, "small-0") == small_pod  # no other job's pod deleted
    assert dra_env.get("resourceclaim", "forged")["status"]["allocation"]
    assert_never_over(dra_env)


def test_a_claim_with_two_requests_on_one_gpu_counts_it_whole_and_deletes_nothing(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    api, rec = placer
    dra_env.apply(dljob(dra_env.namespace, "r", replicas=1, core=30, mib=1000))
    r = running(dra_env, rec, "r")
    r_pod = pod_uid(dra_env, "r-0")
    uuid = simulated_gpu_uuid(dra_env.node, r["gpuIndex"])
    pair = [request("a", uuid, 20), request("b", uuid, 20)]
    assert not tenant_claim(dra_env, "twice", pair).returncode
    results = allocation(dra_env, "twice")
    # the allocator satisfied both requests from the one shareable device
    assert {x["device"] for x in results} == {f"gpu-{r['gpuIndex']}"} and len(results) == 2
    for _ in range(3):
        report = rec.run_pass()
        assert report.replaced == 0
    assert horus_core(api, dra_env, r["gpuIndex"]) == 100  # the most it could take
    assert pod_uid(dra_env, "r-0") == r_pod and status(dra_env, "r")["phase"] == "Running"
    dra_env.apply(dljob(dra_env.namespace, "n", replicas=1, core=50, mib=8000))
    n = running(dra_env, rec, "n")
    assert n["gpuIndex"] != r["gpuIndex"]  # fits elsewhere: placed there, runs
    assert pod_uid(dra_env, "r-0") == r_pod


def test_an_admin_access_claim_is_counted_whole_and_deletes_nothing(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    api, rec = placer
    dra_env.apply(dljob(dra_env.namespace, "r", replicas=1, core=30, mib=1000))
    r = running(dra_env, rec, "r")
    r_pod = pod_uid(dra_env, "r-0")
    other = 1 - int(r["gpuIndex"])
    uuid = simulated_gpu_uuid(dra_env.node, other)
    # adminAccess is allowed only in a namespace an admin marked for it
    dra_env.kubectl(
        "label", "namespace", dra_env.namespace, "resource.kubernetes.io/admin-access=true"
    )
    try:
        made = tenant_claim(dra_env, "admin", [request("gpu", uuid, cores=10, adminAccess=True)])
        if made.returncode:  # refused by the apiserver: nothing to count
            pytest.skip(f"this control plane refuses adminAccess claims: {made.stderr[:200]}")
        (got,) = allocation(dra_env, "admin")
        assert got.get("adminAccess") is True and got["device"] == f"gpu-{other}"
        for _ in range(3):
            assert rec.run_pass().replaced == 0
        assert horus_core(api, dra_env, other) == 100  # the whole GPU, whatever it consumed
        # a 50 % job fits beside r, not on the GPU the admin claim holds: placed, runs
        dra_env.apply(dljob(dra_env.namespace, "n", replicas=1, core=50, mib=8000))
        n = running(dra_env, rec, "n")
        assert n["gpuIndex"] == r["gpuIndex"]
        assert pod_uid(dra_env, "r-0") == r_pod and status(dra_env, "r")["phase"] == "Running"
        assert_never_over(dra_env)
    finally:
        dra_env.kubectl(
            "label", "namespace", dra_env.namespace, "resource.kubernetes.io/admin-access-"
        )


def test_a_tenant_taking_each_decisions_gpu_in_turn_deletes_nothing_that_runs(
    dra_env: DraEnv, placer: tuple[Scoped, Reconciler]
) -> None:
    """The tenant wins the race against two decisions of job ``v`` in a row (its claim and
    pod are allocated before Horus' claim exists), each time taking the GPU just chosen and
    giving back the one it took before. ``v`` is re-placed once per GPU, then waits rather
    than go back to a GPU it lost, and runs once the avoid period is over; the running job
    ``r`` keeps its pod throughout."""
    api, rec = placer
    assert rec.claim_path is not None
    rec.claim_path.avoid_s = 30.0
    dra_env.apply(dljob(dra_env.namespace, "r", replicas=1, core=20, mib=1000))
    running(dra_env, rec, "r")
    r_pod = pod_uid(dra_env, "r-0")
    taken: list[str] = []

    def attack(namespace: str, manifest: dict[str, Any]) -> None:
        if not manifest["metadata"]["name"].startswith("v-") or len(taken) >= 2:
            api.before_claim = attack if len(taken) < 2 else None
            return
        selector = manifest["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
        uuid = selector[0]["cel"]["expression"].split('"')[-2]
        name = f"grab{len(taken)}"
        # 60 %: fits beside r (20 %), not beside r and v (50 %), nor beside v alone
        assert not tenant_claim(dra_env, name, [request("gpu", uuid, 60)]).returncode
        allocation(dra_env, name)
        if taken:  # gives the GPU it took before back
            for kind in ("pod", "resourceclaim"):
                dra_env.kubectl("delete", kind, taken[-1], "-n", namespace, "--wait=false")
        taken.append(name)
        api.before_claim = attack

    api.before_claim = attack
    dra_env.apply(dljob(dra_env.namespace, "v", replicas=1, core=50, mib=8000))
    seen: list[tuple[str, str]] = []

    def v_runs() -> bool:
        st = status(dra_env, "v")
        seen.append((str(st.get("phase")), str(st.get("reason"))))
        assert pod_uid(dra_env, "r-0") == r_pod  # never deleted, at any pass
        return st.get("phase") == "Running"

    passes_until(rec, "v Running", v_runs, 180)
    assert len(taken) == 2
    assert ("Queued", "OvertakenWaiting") in seen  # waited instead of a GPU it lost
    assert ("Failed", "") not in {(p, "") for p, _ in seen}
    rec.writer.drain()
    events = dra_env.kubectl(
        "get", "events", "-n", dra_env.namespace,
        "--field-selector", "involvedObject.name=v", "-o", "json",
    ).stdout  # fmt: skip
    assert json.loads(events)["items"]
    overtakes = [e for e in json.loads(events)["items"] if e["reason"] == "ClaimOvertaken"]
    assert sum(int(e.get("count") or 1) for e in overtakes) == 2  # once per GPU
    assert status(dra_env, "r")["phase"] == "Running"
    assert_never_over(dra_env)
