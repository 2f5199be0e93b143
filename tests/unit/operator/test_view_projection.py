"""What the watch-fed view keeps of each object (issue 27): pods that matter to Horus whole,
others as their identity; nothing carries managedFields or a node's image list."""

from __future__ import annotations

from typing import Any

import pytest

from horus.common import constants as c
from horus.operator.view import lean, node_projection, pod_matters, pod_projection

pytestmark = pytest.mark.unit

_MF = [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}]


def _pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u", "resourceVersion": "3",
                     "managedFields": _MF, **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def test_a_pod_that_matters_is_kept_whole_without_managed_fields() -> None:
    ours = _pod("j-0", labels={c.LABEL_DLJOB_NAME: "j"})
    asking = _pod("p")
    asking["spec"]["containers"][0]["resources"] = {"limits": {c.RESOURCE_GPU_CORE: "30"}}
    for pod in (ours, asking, _pod("a", annotations={c.ANNOTATION_GPU_ASSIGNMENT: "{}"})):
        assert pod_matters(pod)
        kept = pod_projection(pod)
        assert kept["spec"] == pod["spec"] and "managedFields" not in kept["metadata"]
        assert "managedFields" in pod["metadata"]  # the original is not changed


def test_a_foreign_pod_is_kept_as_its_identity() -> None:
    kept = pod_projection(_pod("tenant"))
    assert kept == {
        "metadata": {"name": "tenant", "namespace": "ns", "uid": "u", "resourceVersion": "3"},
        "status": {"phase": "Running"},
    }


def test_a_node_loses_its_image_list_and_managed_fields_only() -> None:
    node = {
        "metadata": {"name": "n", "managedFields": _MF, "labels": {"a": "b"}},
        "status": {"images": [{"names": ["x"]}], "conditions": [{"type": "Ready"}]},
    }
    kept = lean(node)
    assert kept == {
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "status": {"conditions": [{"type": "Ready"}]},
    }
    plain = {"metadata": {"name": "m"}}
    assert lean(plain) is plain


def test_a_nodes_heartbeat_is_not_kept() -> None:
    node = {
        "metadata": {"name": "n"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-26T10:00:00Z"}
            ]
        },
    }
    assert node_projection(node)["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert node["status"]["conditions"][0]["lastHeartbeatTime"]  # the original is not changed
