"""Run-time correction on the real control plane, with the operator as a process (issue 17).

Two jobs share the only GPU of a small pool; the node agent (here: the test, writing what the
agent writes) measures that they slow each other badly; once a second GPU exists, one of them
must move there within two passes, leaving exactly one pod per replica — also when the
operator is killed -9 over and over while the move is under way. A `Never` job never moves. A
job of a higher PriorityClass preempts a lower one, which goes back to the queue and runs
again once there is room; a lower class never preempts a higher one.
"""

from __future__ import annotations

import copy
import json
import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from operator_support import Kube, dljob_body

from horus.devcluster.nodes import NodeSpec, add_nodes

CORRECTION = ["--correction-period", "1", "--resync-period", "1"]


@pytest.fixture
def pool(cluster: Any, kube: Kube, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A tainted pool of one 1-GPU kwok node only this test's jobs may use; ``grow()`` adds a
    second one. Beside it, an idle GPU node outside the pool (no label, no taint; named to sort
    first, as ties go to the first node) that the jobs' node selector rules out: neither
    placement nor a move may use it. Moves may happen at once (no minimum interval between a
    job's moves)."""
    monkeypatch.setenv("HORUS_MIGRATION_MIN_INTERVAL_S", "0")
    name = f"mv-{uuid.uuid4().hex[:4]}"
    made: list[str] = []

    def grow() -> str:
        (new,) = add_nodes(
            cluster.kubeconfig, NodeSpec(count=1, gpus_per_node=1, prefix=f"{name}-{len(made)}")
        )
        kube.core.patch_node(
            new,
            {
                "metadata": {"labels": {"horus-test/pool": name}},
                "spec": {
                    "taints": [{"key": "horus-test/pool", "value": name, "effect": "NoSchedule"}]
                },
            },
        )
        made.append(new)
        return new

    (outside,) = add_nodes(
        cluster.kubeconfig, NodeSpec(count=1, gpus_per_node=2, prefix=f"a-{name}-outside")
    )
    made.append(outside)
    grow()
    yield name, grow
    for n in made:
        kube.core.delete_node(n)
    assert not [
        j for j, x in kube.jobs_by_name().items()
        for p in (x.get("status") or {}).get("placements") or [] if p.get("node") == outside
    ], "a job was placed or moved onto a node its nodeSelector rules out"  # fmt: skip


def _job(pool: str, name: str, policy: str = "OnCheckpoint", **kw: Any) -> dict[str, Any]:
    body = copy.deepcopy(dljob_body(name, core=40, memory=8000, **kw))
    spec = body["spec"]
    spec["migration"] = (
        {"policy": policy, "checkpointPath": "/ckpt", "gracePeriodSeconds": 1}
        if policy == "OnCheckpoint"
        else {"policy": "Never"}
    )
    spec["template"]["spec"]["nodeSelector"] = {"horus-test/pool": pool}
    spec["template"]["spec"]["tolerations"] = [{"key": "horus-test/pool", "operator": "Exists"}]
    return body


def _status(kube: Kube, name: str) -> dict[str, Any]:
    return (kube.jobs_by_name().get(name) or {}).get("status") or {}


def _measure(kube: Kube, names: list[str], speed: float) -> None:
    """What the node agent writes after sampling the pair (``status.observed``)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for n in names:
        kube.custom.patch_namespaced_custom_object_status(
            "horus.io", "v1alpha1", kube.namespace, "dljobs", n,
            {"status": {"observed": {"util": 35.0, "sampledAt": now, "pairs": [
                {"other": "resnet50@64", "gpuModel": "H100", "speed": speed, "samples": 12}]}}},
        )  # fmt: skip


def _one_pod_per_replica(kube: Kube, names: list[str]) -> None:
    pods = [p["metadata"]["name"] for p in kube.pods(kube.namespace)]
    assert sorted(pods) == sorted(f"{n}-0" for n in names), pods


def _running_shared(kube: Kube, pool: str, names: list[str], grow: Any) -> str:
    kube.create_jobs([_job(pool, n) if n != "never" else _job(pool, n, "Never") for n in names])
    try:
        kube.wait(
            "both Running on the one GPU",
            lambda: all(_status(kube, n).get("phase") == "Running" for n in names),
            90,
        )
    except AssertionError as exc:
        statuses = {n: _status(kube, n) for n in names}
        raise AssertionError(f"{exc}; statuses: {statuses}") from None
    nodes = {_status(kube, n)["placements"][0]["node"] for n in names}
    assert len(nodes) == 1
    return grow()


def _moved(kube: Kube, names: list[str], new_node: str) -> list[str]:
    return [
        n for n in names if (_status(kube, n).get("placements") or [{}])[0].get("node") == new_node
    ]


def test_a_measured_bad_pair_is_split_within_two_passes(
    pool: Any, kube: Kube, operator_factory: Any
) -> None:
    name, grow = pool
    operator_factory(extra_args=CORRECTION)
    new = _running_shared(kube, name, ["a", "b"], grow)
    _measure(kube, ["a", "b"], 0.3)
    started = time.monotonic()
    kube.wait("one job moved", lambda: len(_moved(kube, ["a", "b"], new)) == 1, 30, 0.2)
    print(f"moved {time.monotonic() - started:.1f}s after the measurement (passes every 1 s)")
    (moved,) = _moved(kube, ["a", "b"], new)
    kube.wait(
        "the moved job Running on its new GPU, the move closed",
        lambda: (
            _status(kube, moved).get("phase") == "Running"
            and not _status(kube, moved).get("migration")
        ),
        90,
    )
    _one_pod_per_replica(kube, ["a", "b"])
    status = _status(kube, moved)
    assert status["migrations"]["count"] == 1 and status["migrations"]["lastTo"].startswith(new)
    assert any(
        e["reason"] == "Migrated" for e in kube.events() if e["involvedObject"]["name"] == moved
    )
    time.sleep(5)  # several more rounds: nothing flaps back
    assert _moved(kube, ["a", "b"], new) == [moved]


def test_a_never_job_is_never_moved(pool: Any, kube: Kube, operator_factory: Any) -> None:
    name, grow = pool
    operator_factory(extra_args=CORRECTION)
    kube.create_jobs([_job(name, "never", "Never"), _job(name, "other", "Never")])
    kube.wait(
        "both Running",
        lambda: all(_status(kube, n).get("phase") == "Running" for n in ("never", "other")),
        90,
    )
    new = grow()
    _measure(kube, ["never", "other"], 0.3)
    time.sleep(8)  # eight correction rounds
    assert not _moved(kube, ["never", "other"], new)
    assert "migrations" not in _status(kube, "never")


def test_kill_9_during_a_move_loses_nothing(pool: Any, kube: Kube, operator_factory: Any) -> None:
    name, grow = pool
    op = operator_factory(extra_args=CORRECTION, lease_duration=3.0)
    new = _running_shared(kube, name, ["a", "b"], grow)
    _measure(kube, ["a", "b"], 0.3)
    rng = random.Random(17)
    deadline = time.monotonic() + 90
    kills = 0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 2.0))
        op.kill9()
        kills += 1
        pods = kube.pods(kube.namespace)
        assert len({p["metadata"]["name"] for p in pods}) == len(pods) <= 2
        op.start()
        moved = _moved(kube, ["a", "b"], new)
        if (
            moved
            and _status(kube, moved[0]).get("phase") == "Running"
            and not _status(kube, moved[0]).get("migration")
        ):
            break
    else:
        raise AssertionError(f"the move did not finish in 90 s ({kills} kills)")
    print(f"move finished across {kills} kill -9s")
    assert len(_moved(kube, ["a", "b"], new)) == 1
    assert {_status(kube, n).get("phase") for n in ("a", "b")} == {"Running"}
    _one_pod_per_replica(kube, ["a", "b"])


@pytest.fixture
def classes(cluster: Any) -> Any:
    """PriorityClasses of this test's own, ``gold`` (1000) above ``bronze`` (100)."""
    tag = uuid.uuid4().hex[:5]
    made = {"gold": (f"gold-{tag}", 1000), "bronze": (f"bronze-{tag}", 100)}
    for name, value in made.values():
        cluster.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass", "metadata": {"name": name}, "value": value}),
        )  # fmt: skip
    yield {k: name for k, (name, _) in made.items()}
    for name, _ in made.values():
        cluster.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)


def _whole_gpu(body: dict[str, Any], klass: str) -> dict[str, Any]:
    body["spec"]["gpu"] = {"mode": "explicit", "corePercent": 100, "memoryMiB": 60000}
    body["spec"]["priorityClassName"] = klass
    return body


def test_a_higher_priority_job_preempts_and_the_victim_resumes(
    pool: Any, kube: Kube, operator_factory: Any, classes: dict[str, str]
) -> None:
    name, _grow = pool
    operator_factory(extra_args=CORRECTION)
    kube.create_jobs([_whole_gpu(_job(name, "low"), classes["bronze"])])
    kube.wait("low Running", lambda: _status(kube, "low").get("phase") == "Running", 90)
    kube.create_jobs([_whole_gpu(_job(name, "high", "Never"), classes["gold"])])
    kube.wait("high Running", lambda: _status(kube, "high").get("phase") == "Running", 90)
    low_status = _status(kube, "low")
    assert low_status["phase"] == "Queued" and low_status["migrations"]["preemptions"] == 1
    assert (_status(kube, "high")["priority"], low_status["priority"]) == (1000, 100)
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in kube.events()}
    assert ("low", "Preempted") in reasons and ("high", "Preempting") in reasons
    kube.custom.delete_namespaced_custom_object(
        "horus.io", "v1alpha1", kube.namespace, "dljobs", "high"
    )
    kube.wait("low runs again", lambda: _status(kube, "low").get("phase") == "Running", 90)


def test_a_lower_class_never_preempts_a_higher_checkpointing_job(
    pool: Any, kube: Kube, operator_factory: Any, classes: dict[str, str]
) -> None:
    """The running job may be preempted (OnCheckpoint) but its class is the higher one: the
    waiting lower-class job waits, round after round (the running job's priority is the value
    recorded at admission; the live state's requests carry none, so it used to count as 0)."""
    name, _grow = pool
    operator_factory(extra_args=CORRECTION)
    kube.create_jobs([_whole_gpu(_job(name, "high"), classes["gold"])])
    kube.wait("high Running", lambda: _status(kube, "high").get("phase") == "Running", 90)
    kube.create_jobs([_whole_gpu(_job(name, "low", "Never"), classes["bronze"])])
    kube.wait("low queued", lambda: _status(kube, "low").get("phase") == "Queued", 60)
    time.sleep(5)  # five correction rounds
    high = _status(kube, "high")
    assert high["phase"] == "Running" and not (high.get("migrations") or {}).get("preemptions")
    low = _status(kube, "low")
    assert low["phase"] == "Queued" and not low.get("placements"), low
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in kube.events()}
    assert ("high", "Preempted") not in reasons and ("low", "Preempting") not in reasons
