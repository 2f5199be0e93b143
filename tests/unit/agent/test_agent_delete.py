"""The watchdog's one write to a pod: a DELETE of the measured pod, never an Eviction.

Issue 24: the node identity no longer has ``pods/eviction``. An Eviction's admission request
names only the pod, so no admission policy can keep a node to the pods bound to it; a DELETE's
``oldObject`` is the pod, and ``horus-node-own-pods`` (manifests/rbac/node.yaml) refuses the
node identity every pod not on its own node. The requests are checked at the seam where the
Kubernetes client meets the apiserver.
"""

from __future__ import annotations

from typing import Any

import pytest

from horus.agent.kube import AgentApi, KubeActions
from horus.agent.pods import PodInfo
from horus.api.assignment import GpuAssignment
from kube_fakes import RawResponse


class ApiServer:
    """Records each request and answers with ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls: list[tuple[str, str, Any]] = []

    def param_serialize(self, method: str, path: str, **kw: Any) -> tuple[Any, ...]:
        return (method, path, kw.get("query_params"), kw.get("body"))

    def call_api(self, method: str, path: str, _query: Any, body: Any, **_: Any) -> RawResponse:
        self.calls.append((method, path, body))
        return RawResponse(self.status, b"{}" if self.status < 300 else b"refused")


def _pod(uid: str = "uid-hog") -> PodInfo:
    return PodInfo("ns", "hog", uid, "n1", GpuAssignment("n1", "GPU-0", 0, 40, 2048))


def test_the_watchdog_deletes_the_measured_pod_and_never_evicts() -> None:
    """With the pod's own grace period (no gracePeriodSeconds: a DLJob replica checkpoints on
    SIGTERM) and a UID precondition, so a pod re-created under the same name since the
    measurement is never the one deleted."""
    server = ApiServer()
    assert KubeActions(AgentApi(server)).evict(_pod(), "over its share")
    assert server.calls == [
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/hog",
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "uid-hog"}},
        )
    ]


def test_a_pod_without_a_uid_is_deleted_without_a_precondition() -> None:
    """An empty UID precondition would never match (409), and the pod would stay."""
    server = ApiServer()
    assert AgentApi(server).delete_pod(_pod(uid=""))
    assert server.calls[0][2] == {"apiVersion": "v1", "kind": "DeleteOptions"}


@pytest.mark.parametrize(("status", "done"), [(404, True), (409, True), (403, False), (500, False)])
def test_a_delete_that_finds_no_such_pod_is_done_a_refused_one_is_retried(
    status: int, done: bool
) -> None:
    """404: already gone; 409: the UID precondition failed, so the measured pod is gone and
    another has its name; 403 (an admission policy's refusal) or 500: False, and the watchdog
    tries again on its next cycle."""
    assert AgentApi(ApiServer(status)).delete_pod(_pod()) is done
