"""The commit pipeline: a job's replicas go out concurrently, each in order (pod → Binding)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from opfixtures import KEY, dljob, share


class FakeCore:
    """Records pod creates and Bindings, slowly, so replicas overlap."""

    def __init__(self, fail_bind: str | None = None) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_bind = fail_bind
        self.responses: list[RawResp] = []
        self.bindings: list[dict[str, Any]] = []

    def _enter(self, what: str, name: str) -> None:
        with self.lock:
            self.calls.append((what, name))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(0.05)
        with self.lock:
            self.in_flight -= 1

    def _resp(self, body: dict[str, Any]) -> RawResp:
        resp = RawResp(json.dumps(body).encode())
        with self.lock:
            self.responses.append(resp)
        return resp

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        self._enter("create", body["metadata"]["name"])
        created = {
            **body,
            "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"},
        }
        return self._resp(created)

    def create_namespaced_pod_binding(
        self, pod: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> Any:
        name = body["metadata"]["name"]
        with self.lock:
            self.bindings.append(body)
        self._enter("bind", name)
        if name == self.fail_bind:
            raise RuntimeError("apiserver unavailable")
        return self._resp({"kind": "Status", "status": "Success"})


class RawResp:
    """Stands in for urllib3's raw response: the pooled connection is held until released."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def drain_conn(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


def _committer(core: FakeCore, leader: Any = lambda: True) -> Any:
    """The commit pipeline over the real :class:`KubeJobApi`, its client's core API faked."""
    from horus.operator.commit import Committer
    from horus.operator.jobapi import KubeJobApi
    from horus.operator.metrics import OperatorMetrics
    from horus.operator.writer import StatusWriter

    api = KubeJobApi.from_clients(core, None)
    writer = StatusWriter(api, lambda: KEY, OperatorMetrics(), "test")
    units = {"n1": 1, "n2": 1}
    return Committer(api, writer, leader, lambda: units, ThreadPoolExecutor(max_workers=8), 300.0)


def _ctx(replicas: int) -> Any:
    from horus.operator.pass_state import JobCtx

    obj = dljob(
        "train",
        [share("n1" if i % 2 else "n2", i % 8) for i in range(replicas)],
        phase="Scheduled",
        replicas=replicas,
    )
    return JobCtx(obj, None, json.loads(json.dumps(obj["status"])))


def test_replicas_concurrent_each_created_before_bound() -> None:
    from horus.operator.pass_state import PassReport

    core = FakeCore()
    rec = _committer(core)
    ctx, report = _ctx(4), PassReport()
    rec.ensure_pods(ctx, report)
    assert (report.pods_created, report.pods_bound) == (4, 4)
    assert core.max_in_flight > 1  # replicas overlapped
    for r in range(4):
        name = f"train-{r}"
        assert core.calls.index(("create", name)) < core.calls.index(("bind", name))
    assert all(ctx.pods[r]["spec"]["nodeName"] for r in range(4))
    # each Binding names the created pod's UID (a precondition) and carries the signature
    # the apiserver copies onto the pod: for that UID, the job's UID and the record's epoch
    from horus.api.podassignment import read_pod_assignment
    from horus.common import constants as c

    for body in core.bindings:
        meta = body["metadata"]
        pod = ctx.pods[int(meta["name"].rsplit("-", 1)[1])]
        assert meta["uid"] == pod["metadata"]["uid"] == f"uid-{meta['name']}"
        pod["metadata"]["annotations"].update(meta["annotations"])
        read = read_pod_assignment(pod, KEY)
        assert read.trusted and read.epoch == ctx.status[c.STATUS_PLACEMENT_EPOCH]
    # every raw response (4 pods, 4 Bindings) gave its connection back to the pool
    assert len(core.responses) == 8 and all(r.released for r in core.responses)


def test_one_failed_replica_is_reraised_after_the_others_finish() -> None:
    from horus.operator.pass_state import PassReport

    core = FakeCore(fail_bind="train-1")
    rec = _committer(core)
    report = PassReport()
    with pytest.raises(RuntimeError, match="apiserver unavailable"):
        rec.ensure_pods(_ctx(4), report)
    assert (report.pods_created, report.pods_bound) == (4, 3)  # the next pass binds train-1


def test_no_writes_without_the_lease() -> None:
    from horus.operator.pass_state import PassReport

    core = FakeCore()
    rec = _committer(core, leader=lambda: False)
    rec.ensure_pods(_ctx(3), PassReport())
    assert core.calls == []


def test_pass_report_counts_from_many_threads() -> None:
    from horus.operator.pass_state import PassReport

    report = PassReport()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: report.count("pods_bound"), range(2000)))
    assert report.pods_bound == 2000
