"""A leader told to stop (SIGTERM: a rolling update, a drain) stops writing at once and gives the
Lease up, as client-go's ``leaderelection`` does with ``ReleaseOnCancel``.

Found on real nodes: after ``helm upgrade`` changed the placement path, the old replica, in its
termination grace period, still held the Lease and placed a job the old way. Here the leader is
SIGTERMed while a queue of DLJobs is being placed; every write to the namespace's DLJobs, pods
and Events is watched from just after the signal, and the Lease is read until it is free.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from typing import Any

from operator_support import Kube, check_invariants, dljob_body

from horus.common import constants as c

LEASE_S = 10.0
#: The operator's --workers: its pass writes from at most 2 × workers threads (the commit
#: chains and their replicas), so at most that many writes can be on the wire at the signal.
WORKERS = 16
#: Time enough for the signal to reach the loop and a request on the wire to be answered
#: (0.2 s at most measured on the loaded 2-core dev machine). Before the fix the leader went on
#: placing until kopf's own stop reached the cleanup handler: 0.27-0.45 s there, 12-84 writes.
IN_FLIGHT_S = 0.5
#: Signal to free Lease: the pass in flight's end (at most OPERATOR_STOP_WAIT_SECONDS, 2 s)
#: and one Lease update, not a lease duration.
RELEASE_BOUND_S = 4.0


def _lease(kube: Kube, name: str) -> Any:
    from kubernetes import client

    api: Any = client.CoordinationV1Api(kube.api)
    return api.read_namespaced_lease(name, c.HORUS_NAMESPACE)


class _Writes:
    """Every placement write the operator could have made in ``kube.namespace``, with its
    resourceVersion: DLJobs modified or deleted (only the operator writes their status; the
    test only creates them), pods created, bound or deleted (kwok only sets their status).

    One etcd serves this apiserver, so a resourceVersion is its revision, ordered across kinds:
    a write with a higher one was committed later (the apiserver calls them opaque; on this
    control plane they are etcd's single counter)."""

    def __init__(self, kube: Kube) -> None:
        from kubernetes import client

        self.kube = kube
        self.seen: list[tuple[int, float, str]] = []
        self._stop = threading.Event()
        custom: Any = client.CustomObjectsApi(kube.api)
        core: Any = client.CoreV1Api(kube.api)
        jobs = custom.list_namespaced_custom_object(
            c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL
        )
        pods = core.list_namespaced_pod(kube.namespace)
        self.bound = {p.metadata.name: bool(p.spec.node_name) for p in pods.items}
        args = (c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL)
        self.threads = [
            threading.Thread(
                target=self._watch,
                args=("dljob", custom.list_namespaced_custom_object, args, jobs["metadata"]),
                daemon=True,
            ),
            threading.Thread(
                target=self._watch,
                args=(
                    "pod",
                    core.list_namespaced_pod,
                    (kube.namespace,),
                    {"resourceVersion": pods.metadata.resource_version},
                ),
                daemon=True,
            ),
        ]
        for t in self.threads:
            t.start()

    def _watch(self, kind: str, call: Any, args: tuple[Any, ...], meta: dict[str, Any]) -> None:
        from kubernetes import watch as watch_module

        watch: Any = watch_module
        rv = meta["resourceVersion"]
        while not self._stop.is_set():
            for ev in watch.Watch().stream(call, *args, resource_version=rv, timeout_seconds=2):
                obj = ev["object"]
                if not isinstance(obj, dict):
                    obj = self.kube.api.sanitize_for_serialization(obj)
                rv = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                what = f"{ev['type']} {kind} {name}"
                if kind == "dljob" and ev["type"] == "ADDED":
                    continue  # the test's own
                if kind == "pod":
                    node = (obj.get("spec") or {}).get("nodeName")
                    if ev["type"] == "MODIFIED" and not (node and not self.bound.get(name)):
                        continue  # kwok's status writes
                    self.bound[name] = bool(node)
                    what += f" node={node}"
                self.seen.append((int(rv), time.monotonic(), what))

    def stop(self) -> list[tuple[int, float, str]]:
        self._stop.set()
        for t in self.threads:
            t.join(10)
        return sorted(self.seen)


def _current_rv(kube: Kube) -> int:
    """etcd's revision now (a list's resourceVersion; reads write nothing)."""
    listed = kube.core.list_namespaced_config_map(kube.namespace, limit=1)
    return int(listed.metadata.resource_version)


def test_sigterm_stops_writes_before_releasing_the_lease(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    old = operator_factory(
        identity="old-replica", lease_duration=LEASE_S, extra_args=("--workers", str(WORKERS))
    )
    lease = operator_factory.lease
    old.wait_leader()
    # DLJobs keep coming (5 every 0.2 s) until the old replica is gone: it is placing when the
    # signal lands, with work left to start, whatever the machine's pace.
    names: list[str] = []
    done = threading.Event()

    def keep_submitting() -> None:
        while not done.is_set():
            batch = [f"q-{len(names) + k:04d}" for k in range(5)]
            kube.create_jobs([dljob_body(n, 1) for n in batch], workers=5)
            names.extend(batch)
            time.sleep(0.2)

    submitter = threading.Thread(target=keep_submitting, daemon=True)
    submitter.start()
    writes = _Writes(kube)
    kube.wait(  # placing, not only admitting: pods made and bound (the signing key exists)
        "the leader placing",
        lambda: sum(" pod " in w for _, _, w in list(writes.seen)) >= 10,
        90,
        0.1,
    )
    assert old.proc is not None
    before = _current_rv(kube)
    os.kill(old.proc.pid, signal.SIGTERM)
    signalled = time.monotonic()
    time.sleep(IN_FLIGHT_S)
    settled = _current_rv(kube)
    released = None
    while time.monotonic() - signalled < LEASE_S:
        if not _lease(kube, lease).spec.holder_identity:
            released = time.monotonic() - signalled
            break
        time.sleep(0.05)
    old.proc.wait(30)
    exited = time.monotonic() - signalled
    time.sleep(2.0)  # anything the stopped process left on the wire would show by now
    done.set()
    submitter.join(30)
    seen = writes.stop()
    busy = [w for rv, at, w in seen if rv <= before and at >= signalled - 1.0 and " pod " in w]
    after_signal = [(rv, f"+{at - signalled:.2f}s {w}") for rv, at, w in seen if rv > before]
    record = _lease(kube, lease)
    release_rv = int(record.metadata.resource_version)
    late = [w for rv, w in after_signal if rv > release_rv]
    kept_on = [w for rv, w in after_signal if rv > settled]
    placed = sum(bool((j.get("status") or {}).get("placements")) for j in kube.jobs())
    print(
        f"signal -> Lease free {released}s, process exit {exited:.2f}s; {placed}/{len(names)} "
        f"placed; {len(busy)} pod writes in the second before the signal; "
        f"{len(after_signal)} writes seen after the signal, the last: "
        f"{after_signal[-3:]}; Lease released at rv {release_rv}"
    )
    # No placement write after the Lease was given up: the next leader never races it.
    assert not record.spec.holder_identity
    assert not late, f"the stopped leader wrote after releasing the Lease: {late[:10]}"
    # ... and none begun after the signal: only requests already on the wire may land.
    assert len(after_signal) <= 2 * WORKERS, f"the stopping leader went on: {after_signal}"
    assert not kept_on, f"the stopping leader wrote {IN_FLIGHT_S}s after the signal: {kept_on}"
    assert released is not None and released <= RELEASE_BOUND_S, released
    assert old.proc.returncode == 0, old.proc.returncode
    assert busy, "the leader was not placing when the signal landed: nothing was tested"
    assert placed < len(names)
    # The next replica takes the free Lease at once and finishes what was left half done.
    new = operator_factory(identity="new-replica", lease_duration=LEASE_S)
    new.wait_leader(30)
    kube.wait("the rest placed by the new leader", lambda: kube.all_bound(names), 120)
    check_invariants(kube, expect_running=False)


class _SlowRelease:
    """The real Lease API, with the release's update held back for a moment: a renewal that
    was already on its way (the lease thread) gets that moment to land in between."""

    def __init__(self, api: Any, hold: float) -> None:
        self.api = api
        self.hold = hold
        self.releasing = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def patch_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        self.releasing.set()
        time.sleep(self.hold)
        return self.api.patch_namespaced_lease(*args, **kwargs)


def test_a_renewal_in_flight_cannot_undo_the_release(cluster: Any) -> None:
    """Without the elector's lock the renewal lands between the release's read and its update:
    the update fails on the resourceVersion (the Lease stays held a whole duration) and the
    renewal made this replica leader again, after it had stopped."""
    from kubernetes import client

    from horus.operator.lease import LeaseElector

    api = cluster.api_client()
    core: Any = client.CoreV1Api(api)
    if not [n for n in core.list_namespace().items if n.metadata.name == c.HORUS_NAMESPACE]:
        core.create_namespace({"metadata": {"name": c.HORUS_NAMESPACE}})
    name = f"horus-release-{uuid.uuid4().hex[:6]}"
    slow = _SlowRelease(client.CoordinationV1Api(api), hold=1.0)
    elector = LeaseElector(slow, c.HORUS_NAMESPACE, name, "stopping-replica", LEASE_S)
    assert elector.tick() and elector.is_leader()
    releasing = threading.Thread(target=elector.release)
    releasing.start()
    assert slow.releasing.wait(10)
    renewed = elector.tick()  # the lease thread's round, landing during the release
    releasing.join(10)
    assert not renewed
    assert not elector.is_leader()
    assert not _lease(Kube(api, c.HORUS_NAMESPACE), name).spec.holder_identity
    assert not elector.tick(), "a released elector acquired the Lease again"
