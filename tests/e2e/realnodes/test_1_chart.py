"""The chart as shipped, in-cluster on real nodes: every pod Ready with no restart, one operator
replica leads, the DaemonSet's device plugin serves each kubelet, and Prometheus scrapes the
agents by pod IP."""

from __future__ import annotations

from realnode_support import GPU_MEMORY_MIB, diagnose, query, wait_for

from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster


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


def test_prometheus_scrapes_agents_by_pod_ip(rc: RealCluster, prometheus: str) -> None:
    node_pods = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=node"
    )["items"]
    ips = {p["status"]["podIP"] for p in node_pods}

    def up() -> list[dict]:
        found = query(prometheus, 'up{job="horus-agent"} == 1')
        return found if {r["metric"]["instance"].split(":")[0] for r in found} == ips else []

    wait_for("both agents scraped by pod IP", up, 60, diagnose(rc, NAMESPACE))
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
