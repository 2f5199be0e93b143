"""The chart as shipped, in-cluster on real nodes: every pod Ready with no restart, one operator
replica leads, the DaemonSet's device plugin serves each kubelet, and Prometheus finds the
operator and agent pods through the Kubernetes API and scrapes them by pod IP."""

from __future__ import annotations

from realnode_support import GPU_MEMORY_MIB, diagnose, query, wait_for

from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.prometheus import discovered_pods


def test_chart_pods_ready_on_real_nodes_without_restarts(rc: RealCluster) -> None:
    pods = rc.kube.json("get", "pods", "-n", NAMESPACE)["items"]
    by_component: dict[str, list[dict]] = {}
    for pod in pods:
        comp = pod["metadata"]["labels"].get("app.kubernetes.io/component", "")
        by_component.setdefault(comp, []).append(pod)
    assert len(by_component.get("operator", [])) == 2, diagnose(rc, NAMESPACE)()
    node_pods = by_component.get("node", [])
    assert sorted(p["spec"]["nodeName"] for p in node_pods) == sorted(rc.nodes)
    for pod in by_component["operator"] + node_pods:
        name = pod["metadata"]["name"]
        assert pod["status"]["phase"] == "Running", name
        assert pod["spec"]["nodeName"] in rc.nodes, name
        for status in pod["status"]["containerStatuses"]:
            assert status["ready"], f"{name}/{status['name']} not Ready"
            assert status["restartCount"] == 0, f"{name}/{status['name']} restarted"
            assert status["imageID"], name  # a real container from a real image
    # the two replicas spread over both nodes (the chart's anti-affinity)
    assert {p["spec"]["nodeName"] for p in by_component["operator"]} == set(rc.nodes)
    lease = rc.kube.json("get", "lease", "horus-operator", "-n", NAMESPACE)
    holder = lease["spec"]["holderIdentity"]
    assert any(holder.startswith(p["metadata"]["name"]) for p in by_component["operator"])


def test_device_plugin_of_the_daemonset_serves_each_kubelet(rc: RealCluster) -> None:
    for name in rc.nodes:
        node = rc.kube.json("get", "node", name)
        alloc = node["status"]["allocatable"]
        assert alloc[c.RESOURCE_GPU_CORE] == "100"
        # whole units only: 318 IDs for 81,559 MiB (a partial last unit is not offered)
        assert int(alloc[c.RESOURCE_GPU_MEMORY]) == GPU_MEMORY_MIB // c.DEFAULT_GPU_MEMORY_UNIT_MIB
        assert c.ANNOTATION_GPU_INVENTORY in node["metadata"]["annotations"]
        # the kubelet's view: the plugin's sockets in the node's own device-plugin folder
        sockets = rc.real.device_plugin_dir(name)
        assert {"horus-gpu-core.sock", "horus-gpu-memory.sock", "kubelet.sock"} <= {
            p.name for p in sockets.iterdir()
        }


def test_prometheus_discovers_the_chart_pods_through_the_api_and_scrapes_them(
    rc: RealCluster, prometheus: str
) -> None:
    def names(component: str) -> set[str]:
        pods = rc.kube.json(
            "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}"
        )["items"]
        return {p["metadata"]["name"] for p in pods}

    # each job's targets are exactly the pods behind its metrics Service, found by Prometheus
    # from their EndpointSlices (nothing wrote a target list), and scraped
    want = {"horus-agent": names("node"), "horus-operator": names("operator")}
    assert len(want["horus-agent"]) == len(rc.nodes) and len(want["horus-operator"]) == 2
    wait_for(
        "both agents and both operator replicas discovered and up",
        lambda: discovered_pods(prometheus) == want,
        60,
        lambda: f"{diagnose(rc, NAMESPACE)()}\ndiscovered: {discovered_pods(prometheus)}",
    )
    node_pods = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=node"
    )["items"]
    ips = {p["status"]["podIP"] for p in node_pods}
    found = query(prometheus, 'up{job="horus-agent"} == 1')
    assert {r["metric"]["instance"].split(":")[0] for r in found} == ips  # by pod IP
    gpus = wait_for(
        "per-GPU series from both agents",
        lambda: (
            (r := query(prometheus, c.METRIC_GPU_MEMORY_TOTAL))
            and {x["metric"]["node"] for x in r} == set(rc.nodes)
            and r
        ),
        60,
        diagnose(rc, NAMESPACE),
    )
    assert {r["metric"]["backend"] for r in gpus} == {c.BACKEND_SIMULATED}
    assert query(prometheus, 'up{job="horus-operator"} == 1')
