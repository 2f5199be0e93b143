"""The live cluster state is rebuilt from API objects with the documented rules."""

from __future__ import annotations

from opfixtures import assignment, dljob, node, pod, share

from horus.api.assignment import GpuAssignment, GpuRef
from horus.api.inventory import simulated_gpu_uuid
from horus.operator.livestate import build_cluster_state, build_live_state
from horus.operator.residents import dljob_job_name, pod_job_name


def _core(state, node_name: str, index: int) -> int:  # type: ignore[no-untyped-def]
    return int(state.core_used[state.gpu_id(node_name, index)])


def test_nodes_ready_only_and_unhealthy_gpus_marked() -> None:
    live = build_live_state(
        [
            node("a"),
            node("b", ready=False),
            node("c", unschedulable=True),
            node("d", unhealthy=(1,)),
            {"metadata": {"name": "plain"}, "status": {}},  # no inventory: not a GPU node
        ],
        [],
        [],
    )
    assert live.state.node_names == ["a", "d"]
    assert "NotReady" in live.excluded_nodes["b"]
    assert "cordoned" in live.excluded_nodes["c"]
    assert not live.state.healthy[live.state.gpu_id("d", 1)]
    assert live.state.healthy[live.state.gpu_id("d", 0)]


def test_dljob_placements_count_before_pods_exist() -> None:
    jobs = [dljob("j1", [share("a", 0), share("a", 1)], phase="Scheduled", replicas=2)]
    state = build_cluster_state([node("a")], [], jobs)
    assert _core(state, "a", 0) == 50 and _core(state, "a", 1) == 50
    assert state.jobs[dljob_job_name("default", "j1")].request.replicas == 2


def test_dljob_pods_are_not_counted_twice() -> None:
    jobs = [dljob("j1", [share("a", 0)], phase="Running")]
    pods = [pod("j1-0", assignment("a", 0, job="j1", replica=0), job="j1", replica=0)]
    state = build_cluster_state([node("a")], pods, jobs)
    assert _core(state, "a", 0) == 50
    assert list(state.jobs) == ["default/j1"]


def test_plain_pods_and_orphans_counted_terminal_ignored() -> None:
    pods = [
        pod("plain", assignment("a", 0, core=30)),
        pod("done", assignment("a", 0, core=60), phase="Succeeded"),
        # the DLJob is gone (deleted) but its pod still runs: it holds its share
        pod("gone-0", assignment("a", 1, core=40, job="gone", replica=0), job="gone", replica=0),
        pod("no-assignment", None),
    ]
    state = build_cluster_state([node("a")], pods, [])
    assert _core(state, "a", 0) == 30
    assert _core(state, "a", 1) == 40
    assert set(state.jobs) == {pod_job_name("default", "plain"), "default/gone"}


def test_finished_dljob_releases_its_record_but_running_pods_still_count() -> None:
    jobs = [dljob("j1", [share("a", 0), share("a", 1)], phase="Failed", replicas=2)]
    pods = [pod("j1-1", assignment("a", 1, job="j1", replica=1), job="j1", replica=1)]
    state = build_cluster_state([node("a")], pods, jobs)
    assert _core(state, "a", 0) == 0
    assert _core(state, "a", 1) == 50


def test_shares_on_excluded_nodes_are_dropped_and_bad_records_reported() -> None:
    pods = [
        pod("on-b", assignment("b", 0)),
        pod("bogus", assignment("a", 7)),  # no such GPU
    ]
    live = build_live_state([node("a"), node("b", ready=False)], pods, [])
    assert live.state.jobs == {}
    assert any("bogus" in p for p in live.problems)


def test_deleted_node_drops_only_its_own_shares() -> None:
    """Deleting a Node (autoscaler scale-down) must not drop the job's shares on other nodes:
    they still hold those GPUs, and the next pass would place queued jobs on top of them."""
    record = dljob("j1", [share("a", 0), share("b", 0)], phase="Running", replicas=2)
    pods = [
        pod("plain", GpuAssignment("a", simulated_gpu_uuid("a", 1), 1, 60, 1000)),
        pod("j2-0", assignment("a", 2, core=70, job="j2", replica=0), job="j2", replica=0),
        pod("j2-1", assignment("b", 2, core=70, job="j2", replica=1), job="j2", replica=1),
    ]
    live = build_live_state([node("a", gpus=4)], pods, [record])  # node b deleted
    assert _core(live.state, "a", 0) == 50  # the DLJob record's replica on a
    assert _core(live.state, "a", 2) == 70  # the orphan pod group's replica on a
    assert _core(live.state, "a", 1) == 60
    assert not live.problems, live.problems


def test_overcommitted_record_is_reported_not_raised() -> None:
    pods = [pod("p1", assignment("a", 0, core=80)), pod("p2", assignment("a", 0, core=80))]
    live = build_live_state([node("a")], pods, [])
    assert _core(live.state, "a", 0) == 80
    assert any("p2" in p and "core" in p for p in live.problems)


def test_multi_gpu_assignment_counts_every_gpu() -> None:
    first = GpuRef(simulated_gpu_uuid("a", 0), 0, 100, 20000)
    second = GpuRef(simulated_gpu_uuid("a", 1), 1, 100, 20000)
    a = GpuAssignment("a", first.gpu_uuid, 0, 100, 20000, "big", 0, (first, second))
    state = build_cluster_state([node("a")], [pod("big-0", a, job="big", replica=0)], [])
    assert _core(state, "a", 0) == 100 and _core(state, "a", 1) == 100
    assert state.jobs["default/big"].request.gpus_per_replica == 2


def test_malformed_annotation_is_a_problem() -> None:
    p = pod("x", None)
    p["metadata"]["annotations"]["horus.io/gpu-assignment"] = "{not json"
    live = build_live_state([node("a")], [p], [])
    assert live.problems and "default/x" in live.problems[0]


def test_measured_pairs_of_running_and_finished_dljobs_are_collected() -> None:
    """status.observed.pairs outlive the job's run: a finished DLJob's measurements count."""
    pairs = [{"other": "bert@8", "gpuModel": "H100", "speed": 0.7, "samples": 5}]
    running = dljob("a", [share("n1", 0)], phase="Running")
    done = dljob("b", [share("n1", 1)], phase="Succeeded")
    for job, speed in ((running, 0.7), (done, 0.4)):
        job["status"]["observed"] = {"pairs": [{**pairs[0], "speed": speed}]}
    unmeasured = dljob("c", [share("n1", 1)], phase="Running")
    live = build_live_state([node("n1")], [], [running, done, unmeasured])
    kind = "resnet50@64"  # the fixture profile's model@batch
    assert sorted(live.observed_pairs) == [
        (kind, "bert@8", "H100", 0.4, None),
        (kind, "bert@8", "H100", 0.7, None),
    ]


def test_with_keys_only_signed_records_and_pods_count() -> None:
    """A placement record or pod assignment someone else wrote holds no GPU: the operator
    never makes pods from the one, and the device plugin gives the other no GPU."""
    from opfixtures import KEY

    signed = dljob("j1", [share("a", 0, core=30)], phase="Running")
    forged = dljob("j2", [share("a", 1, core=90)], phase="Scheduled")
    forged["status"]["placementSignature"] = "v1:" + "0" * 64
    resigned = dljob("j3", [share("a", 0, core=20)], phase="Running")
    resigned["status"]["phase"] = "Scheduled"  # changed after signing: no longer the record
    plain = pod("ok", assignment("a", 0, core=10))
    fake = pod("fake", assignment("a", 1, core=70))
    fake["metadata"]["annotations"]["horus.io/gpu-assignment-signature"] = "v1:" + "f" * 64
    live = build_live_state([node("a")], [plain, fake], [signed, forged, resigned], keys=KEY)
    assert _core(live.state, "a", 0) == 40  # j1 + the signed plain pod
    assert _core(live.state, "a", 1) == 0
    assert sum("not signed" in p for p in live.problems) == 3, live.problems
    # without keys (tools, tests) every record is taken at its word, as before
    unchecked = build_live_state([node("a")], [plain, fake], [signed, forged])
    assert _core(unchecked.state, "a", 1) == 90  # the forged record (the pod would exceed 100 %)


def test_a_move_in_progress_counts_both_the_old_and_the_new_shares() -> None:
    """Until the job's old pods have stopped, the GPUs it leaves are still busy."""
    job = dljob("m", [share("a", 1, core=60)], phase="Scheduled")
    job["status"]["migration"] = {
        "from": [{"replica": 0, "pod": "m-0", **share("a", 0, core=60)}],
        "startedTime": "2026-01-01T00:00:00Z",
    }
    live = build_live_state([node("a")], [], [job])
    assert _core(live.state, "a", 0) == 60 and _core(live.state, "a", 1) == 60
    del job["status"]["migration"]  # the move closed: only the new share
    job["metadata"]["resourceVersion"] = "2"  # as the apiserver versions every change
    assert _core(build_live_state([node("a")], [], [job]).state, "a", 0) == 0
