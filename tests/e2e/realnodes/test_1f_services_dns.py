"""Services and DNS on the real nodes (issue 28): kube-proxy on every node and CoreDNS in the
cluster, so a pod on a real node reaches the chart's operator metrics Service by its name as on
any cluster, the kubelets, which have a cluster DNS, report no MissingClusterDNS, and a
kube-scheduler configured with the shipped extender snippet as is reaches the extender through
its Service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from realnode_support import apply, diagnose, plain_pod, wait_for

from horus.common import constants as c
from horus.devcluster.binaries import repo_root as repo_root_path
from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.images import IMAGES, LOCAL_REGISTRY, kubernetes_version, reference

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


SVC_SCHEDULER = "horus-svc-scheduler"


def _svc_scheduler_objects(rc: RealCluster) -> list[dict[str, Any]]:
    """A kube-scheduler pod (the project-built image) whose extender entry is the shipped
    snippet as is: ``urlPrefix: https://horus-operator.horus-system.svc:8888`` — the Service,
    resolved by CoreDNS and carried by kube-proxy — with the client certificate of the
    Secret horus-extender-tls where the snippet's tlsConfig expects it."""
    import yaml

    snippet = yaml.safe_load(
        (repo_root_path() / "manifests" / "scheduler" / "horus-extender-config.yaml").read_text()
    )
    config = {
        **snippet,
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": SVC_SCHEDULER}],
    }
    meta = {"name": SVC_SCHEDULER, "namespace": NAMESPACE}
    tag = kubernetes_version(rc.kube.bin_dir)
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{SVC_SCHEDULER}-{role.split(':')[-1]}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", **meta}],
        }
        for role in ("system:kube-scheduler", "system:volume-scheduler")
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        *bindings,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"config.yaml": yaml.safe_dump(config)},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "serviceAccountName": SVC_SCHEDULER,
                "nodeName": rc.nodes[0],
                "containers": [
                    {
                        "name": "kube-scheduler",
                        "image": f"{LOCAL_REGISTRY}/kube-scheduler:{tag}",
                        "imagePullPolicy": "Never",
                        "args": ["--config=/etc/svc-scheduler/config.yaml", "--v=2"],
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/svc-scheduler"},
                            {"name": "tls", "mountPath": "/etc/kubernetes/horus-extender"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "config", "configMap": {"name": SVC_SCHEDULER}},
                    {"name": "tls", "secret": {"secretName": "horus-extender-tls"}},
                ],
            },
        },
    ]


def test_kube_scheduler_reaches_the_extender_through_its_service(rc: RealCluster) -> None:
    objects = _svc_scheduler_objects(rc)
    pod_name = "via-extender-service"
    plain = plain_pod(pod_name, 20, 2048, SVC_SCHEDULER)
    try:
        for obj in objects:
            apply(rc, obj)
        wait_for(
            "the Service-configured kube-scheduler running",
            lambda: (
                rc.kube.json("get", "pod", SVC_SCHEDULER, "-n", NAMESPACE)["status"].get("phase")
                == "Running"
            ),
            90,
            diagnose(rc, NAMESPACE),
        )
        apply(rc, plain)
        pod = wait_for(
            f"{pod_name} bound through the extender Service and running",
            lambda: (
                (p := rc.kube.json("get", "pod", pod_name))
                and p["status"].get("phase") == "Running"
                and p
            ),
            120,
            lambda: (
                diagnose(rc)()
                + rc.kube.kubectl(
                    "logs", SVC_SCHEDULER, "-n", NAMESPACE, "--tail=40", check=False
                ).stdout
            ),
        )
        # the extender's bind wrote the assignment (kube-scheduler's own binder writes none)
        a = json.loads(pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
        assert (a["node"], a["corePercent"]) == (pod["spec"]["nodeName"], 20)
    finally:
        rc.kube.kubectl(
            "delete", "pod", pod_name, "--ignore-not-found", "--wait=false", check=False
        )
        for obj in reversed(objects):
            kind, name = obj["kind"].lower(), obj["metadata"]["name"]
            ns = ["-n", NAMESPACE] if kind != "clusterrolebinding" else []
            rc.kube.kubectl("delete", kind, name, *ns, "--ignore-not-found", check=False)
