"""An in-memory ClusterSource and plain-pod builders for the scheduler-extender unit tests."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from opfixtures import profile_doc

from horus.common import constants as c
from horus.kube.errors import Conflict as ConflictError
from horus.operator.livestate import LiveObjects


def plain_pod(
    name: str,
    core: int | str | None = 40,
    memory: int | str | None = 10000,
    profile: str | None = "resnet50-bs64",
    namespace: str = "default",
    node: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    if core is not None:
        requests[c.RESOURCE_GPU_CORE] = str(core)
    if memory is not None:
        requests[c.RESOURCE_GPU_MEMORY] = str(memory)
    ann = dict(annotations or {})
    if profile is not None:
        ann[c.ANNOTATION_GRAPH_PROFILE] = json.dumps(profile_doc(profile))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": ann,
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


class FakeSource:
    """Nodes, pods and DLJobs in memory; records every write in ``calls``."""

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]] | None = None,
        dljobs: list[dict[str, Any]] | None = None,
    ) -> None:
        self.nodes = nodes
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods or []}
        self.dljobs = dljobs or []
        self.calls: list[tuple[str, ...]] = []
        self.fail_bind = False
        self.fail_list = False

    def list_objects(self) -> LiveObjects:
        if self.fail_list:
            raise RuntimeError("apiserver unreachable")
        return LiveObjects(
            copy.deepcopy(self.nodes),
            copy.deepcopy(list(self.pods.values())),
            copy.deepcopy(self.dljobs),
        )

    def fresh_objects(self) -> LiveObjects:
        return self.list_objects()

    def generation(self) -> object:
        return None  # no copy: every answer is rebuilt from list_objects

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.pods.get((namespace, name))
        return copy.deepcopy(pod) if pod is not None else None

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        pod = self.pods[(namespace, name)]
        meta = pod["metadata"]
        if resource_version is not None and resource_version != meta["resourceVersion"]:
            raise ConflictError("changed")
        ann = meta.setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                ann.pop(key, None)
            else:
                ann[key] = value
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.calls.append(("patch", namespace, name, ",".join(sorted(annotations))))
        return copy.deepcopy(pod)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.fail_bind:
            raise RuntimeError("binding refused")
        self.pods[(namespace, name)]["spec"]["nodeName"] = node
        self.calls.append(("bind", namespace, name, node))
