"""Services and DNS on the real nodes (issue 28): kube-proxy on every node and CoreDNS in the
cluster, so a pod on a real node reaches the chart's operator metrics Service by its name as on
any cluster, and the kubelets, which have a cluster DNS, report no MissingClusterDNS."""

from __future__ import annotations

import json
from pathlib import Path

from realnode_support import apply, diagnose, wait_for

from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.images import IMAGES, reference

CLIENT = """
import json, socket, sys, urllib.request
name = sys.argv[1]
ip = socket.gethostbyname(name)
body = urllib.request.urlopen(f"http://{name}:{sys.argv[2]}/metrics", timeout=10).read()
print(json.dumps({"ip": ip, "horus_lines": sum(
    1 for line in body.decode().splitlines() if line.startswith("horus_"))}))
"""


def test_operator_metrics_service_answers_by_name_from_a_pod_on_every_real_node(
    rc: RealCluster,
) -> None:
    service = rc.kube.json("get", "service", "horus-operator", "-n", NAMESPACE)
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "metrics")
    nodes = sorted(
        n["metadata"]["name"]
        for n in rc.kube.json("get", "nodes", "-l", "horus.io/dev-node=real")["items"]
    )
    assert len(nodes) >= 2
    names = []
    for i, node in enumerate(nodes):
        name = f"svc-client-{i}"
        names.append(name)
        rc.kube.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
        apply(
            rc,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "client",
                            "image": reference(IMAGES["workload"].repository),
                            "imagePullPolicy": "Never",
                            "command": ["python", "-c", CLIENT],
                            "args": [f"horus-operator.{NAMESPACE}.svc.cluster.local", str(port)],
                        }
                    ],
                },
            },
        )
    try:
        for name in names:
            wait_for(
                f"{name} done",
                lambda name=name: (
                    rc.kube.json("get", "pod", name)["status"].get("phase")
                    in ("Succeeded", "Failed")
                ),
                120,
                diagnose(rc),
            )
            logs = rc.kube.kubectl("logs", name).stdout.strip().splitlines()
            got = json.loads(logs[-1])
            assert got["ip"] == service["spec"]["clusterIP"], logs
            assert got["horus_lines"] > 0, logs
    finally:
        for name in names:
            rc.kube.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false")
    # the kubelets have a cluster DNS: no pod Event says otherwise, no kubelet log line either
    events = rc.kube.kubectl(
        "get", "events", "-A", "--field-selector", "reason=MissingClusterDNS", "-o", "name"
    ).stdout
    assert events.strip() == ""
    logs = list(Path(rc.state.directory, "nodes").glob("*/logs/kubelet.log"))
    assert len(logs) == len(nodes)
    assert not [p for p in logs if "MissingClusterDNS" in p.read_text(errors="replace")]
