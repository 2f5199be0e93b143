"""DLJob status from pods, conditions, lease election and the replica pod manifest."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opfixtures import KEY, dljob, share

from horus.api.assignment import decode_assignment
from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.common.settings import load_settings
from horus.operator import status as st
from horus.operator.lease import LeaseElector
from horus.operator.settings import SECTION, OperatorSettings

R, S, F, P = "Running", "Succeeded", "Failed", "Pending"


def pv(replica: int, phase: str, reason: str = "") -> st.PodView:
    return st.PodView(f"j-{replica}", replica, phase, "n", reason=reason)


@pytest.mark.parametrize(
    ("pods", "current", "phase"),
    [
        ([], c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_SCHEDULED),
        ([pv(0, R)], c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_SCHEDULED),
        ([pv(0, R), pv(1, P)], c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_SCHEDULED),
        ([pv(0, R), pv(1, R)], c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_RUNNING),
        ([pv(0, S), pv(1, R)], c.DLJOB_PHASE_RUNNING, c.DLJOB_PHASE_RUNNING),
        ([pv(0, S), pv(1, S)], c.DLJOB_PHASE_RUNNING, c.DLJOB_PHASE_SUCCEEDED),
        ([pv(0, F, "OOMKilled"), pv(1, R)], c.DLJOB_PHASE_RUNNING, c.DLJOB_PHASE_FAILED),
        ([pv(0, R)], c.DLJOB_PHASE_RUNNING, c.DLJOB_PHASE_FAILED),  # replica 1 deleted
        ([pv(0, R), pv(1, R)], c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_SUCCEEDED),  # final
    ],
)
def test_progress(pods: list[st.PodView], current: str, phase: str) -> None:
    assert st.progress(2, pods, current).phase == phase


def test_failed_message_names_replica_and_reason() -> None:
    prog = st.progress(2, [pv(0, R), pv(1, F, "OOMKilled")], c.DLJOB_PHASE_RUNNING)
    assert prog.reason == "ReplicaFailed"
    assert "replica 1" in prog.message and "OOMKilled" in prog.message


def test_pod_view_reads_labels_and_terminated_reason() -> None:
    pod = {
        "metadata": {"name": "j-1", "labels": {c.LABEL_REPLICA_INDEX: "1"}},
        "spec": {"nodeName": "n"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"reason": "Error"}}}],
        },
    }
    view = st.PodView.from_pod(pod)
    assert view is not None and (view.replica, view.phase, view.reason) == (1, F, "Error")
    assert st.PodView.from_pod({"metadata": {"labels": {}}}) is None


def test_set_condition_keeps_transition_time_unless_status_flips() -> None:
    conds = st.set_condition([], "Scheduled", "False", "NoIdleGPU", "m1", "t1")
    conds = st.set_condition(conds, "Scheduled", "False", "InsufficientGPUMemory", "m2", "t2")
    assert conds[0]["lastTransitionTime"] == "t1" and conds[0]["reason"] == "InsufficientGPUMemory"
    conds = st.set_condition(conds, "Scheduled", "True", "Placed", "m3", "t3")
    assert conds[0]["lastTransitionTime"] == "t3"
    conds = st.set_condition(conds, "Running", "True", "AllReplicasRunning", "", "t4")
    assert [cd["type"] for cd in conds] == ["Scheduled", "Running"]


def test_status_patch_only_owned_changed_fields() -> None:
    old = {"phase": "Queued", "observed": {"util": 3}, "message": "a"}
    new = {"phase": "Queued", "observed": {"util": 9}, "message": "b"}
    assert st.status_patch(old, new) == {"message": "b"}


def test_refusal_reasons_are_condition_reasons() -> None:
    import re

    for code in (
        "impossible",
        "memory",
        "core",
        "slots",
        "interference",
        "busy",
        "gang",
        "held",
        "queued",
        "?",
    ):
        assert re.match(r"^[A-Z][A-Za-z]+$", st.refusal_reason(code))


# --- settings -------------------------------------------------------------------------------


def test_settings_precedence_and_errors(tmp_path: Any) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("operator: {policy: binpack, lease_duration: 9, metrics_port: 9100}\n")
    env = {"HORUS_OPERATOR_LEASE_DURATION": "7"}
    s = load_settings(OperatorSettings, SECTION, cli={"metrics_port": 0}, env=env, config_file=cfg)
    assert (s.policy, s.lease_duration, s.metrics_port) == ("binpack", 7.0, 0)
    with pytest.raises(ConfigError, match="policy must be one of"):
        load_settings(OperatorSettings, SECTION, cli={"policy": "nope"}, env={})
    with pytest.raises(ConfigError, match="--lease-duration"):
        load_settings(OperatorSettings, SECTION, cli={"lease_duration": 0.1}, env={})
    env = {"HORUS_OPERATOR_MAX_JOBS_PER_PASS": "250"}
    assert load_settings(OperatorSettings, SECTION, env=env).max_jobs_per_pass == 250
    for bad in (0, 100_001):
        with pytest.raises(ConfigError, match="--max-jobs-per-pass"):
            load_settings(OperatorSettings, SECTION, cli={"max_jobs_per_pass": bad}, env={})


# --- lease ------------------------------------------------------------------------------------


class FakeLeaseApi:
    """An in-memory Lease store with resourceVersion checks (like the apiserver)."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0

    def _view(self) -> Any:
        assert self.obj is not None
        spec = self.obj["spec"]
        return SimpleNamespace(
            metadata=SimpleNamespace(resource_version=str(self.rv)),
            spec=SimpleNamespace(
                holder_identity=spec.get("holderIdentity"),
                renew_time=spec.get("renewTime"),
                acquire_time=None,
                lease_transitions=spec.get("leaseTransitions"),
                lease_duration_seconds=spec.get("leaseDurationSeconds"),
            ),
        )

    def read_namespaced_lease(self, name: str, ns: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        if self.obj is None:
            raise ApiException(status=404)
        return self._view()

    def create_namespaced_lease(self, ns: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.obj is not None:
            raise ApiException(status=409)
        self.obj, self.rv = body, self.rv + 1

    def replace_namespaced_lease(self, name: str, ns: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        if body["metadata"].get("resourceVersion") != str(self.rv):
            raise ApiException(status=409)
        self.obj, self.rv = body, self.rv + 1


def test_lease_one_leader_and_takeover_after_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    api = FakeLeaseApi()
    a = LeaseElector(api, "ns", "l", "a", lease_duration=3.0)
    b = LeaseElector(api, "ns", "l", "b", lease_duration=3.0)
    assert a.tick() and a.is_leader()
    assert not b.tick() and not b.is_leader()
    clock[0] += 1.0
    assert a.tick()  # renew
    clock[0] += 1.0
    assert not b.tick()  # b saw the record change 1 s ago
    clock[0] += 3.1  # a is dead: no renewals for longer than the lease
    assert not a.is_leader()  # a itself stops writing after the renew deadline
    assert b.tick() and b.is_leader()
    assert api.obj is not None and api.obj["spec"]["holderIdentity"] == "b"
    assert api.obj["spec"]["leaseTransitions"] == 1


def test_lease_race_has_one_winner() -> None:
    api = FakeLeaseApi()
    a = LeaseElector(api, "ns", "l", "a", lease_duration=3.0)
    b = LeaseElector(api, "ns", "l", "b", lease_duration=3.0)
    api.obj = {"spec": {"holderIdentity": None, "leaseDurationSeconds": 3}}  # released
    # both read the same resourceVersion; only the first replace succeeds
    assert a.tick()
    assert not b.tick()


# --- pod manifest -----------------------------------------------------------------------------


def test_pod_manifest_owner_resources_and_a_binding_that_signs_the_assignment() -> None:
    from horus.api.podassignment import read_pod_assignment
    from horus.operator.podspec import binding_annotations, pod_manifest

    obj = dljob(
        "train",
        [share("n1", 2, core=40, mem=8000), share("n1", 3, core=40, mem=8000)],
        phase="Scheduled",
        gpus_per_replica=2,
    )
    obj["status"]["placements"][1]["replica"] = 0  # one replica with two GPUs
    pod = pod_manifest(obj, 0, obj["status"]["placements"], unit_mib=256)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "train-0"
    assert meta["ownerReferences"][0]["uid"] == "uid-train"
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["labels"] == {c.LABEL_DLJOB_NAME: "train", c.LABEL_REPLICA_INDEX: "0"}
    assert spec["schedulerName"] == c.SCHEDULER_NAME and spec["restartPolicy"] == "Never"
    res = spec["containers"][0]["resources"]
    assert res["requests"][c.RESOURCE_GPU_CORE] == res["limits"][c.RESOURCE_GPU_CORE] == "80"
    assert res["requests"][c.RESOURCE_GPU_MEMORY] == str(2 * (8000 // 256))  # whole units
    text = meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
    a = decode_assignment(text)
    assert (a.job, a.replica, len(a.all_gpus)) == ("train", 0, 2)
    # Not signed at creation: the signature binds the pod's UID, which only the created pod
    # has; it goes in the Binding, and the apiserver copies it onto the pod.
    assert c.ANNOTATION_ASSIGNMENT_SIGNATURE not in meta["annotations"]
    meta["uid"] = "uid-of-the-created-pod"
    meta["annotations"].update(binding_annotations(pod, 5, KEY))
    read = read_pod_assignment(pod, KEY)
    assert read.trusted and read.epoch == 5
    meta["uid"] = "uid-of-a-re-created-pod"
    assert not read_pod_assignment(pod, KEY).trusted


# --- metrics ----------------------------------------------------------------------------------


def test_metrics_names_and_stale_series_dropped() -> None:
    from prometheus_client import generate_latest

    from horus.operator.metrics import OperatorMetrics
    from horus.scheduler import GpuView

    m = OperatorMetrics()
    m.set_queue({"NoIdleGPU": 3, "NeverFits": 1})
    m.set_queue({"NeverFits": 1})
    m.set_phases({"Running": 5})
    view = GpuView("n", 0, "GPU-x", "H100", 81920, True, 100, 40, 130.0, ("a", "b"))
    m.set_gpus([view])
    m.decisions.labels(outcome="placed").inc()
    m.latency.observe(0.01)
    text = generate_latest(m.registry).decode()
    assert 'horus_queue_length{reason="NoIdleGPU"} 0.0' in text
    assert 'horus_queue_length{reason="NeverFits"} 1.0' in text
    assert 'horus_dljobs{phase="Running"} 5.0' in text
    assert 'horus_gpu_predicted_utilization_ratio{gpu="0",node="n",uuid="GPU-x"} 1.3' in text
    assert 'horus_scheduling_decisions_total{outcome="placed"} 1.0' in text
    assert "horus_scheduling_decision_duration_seconds_bucket" in text
    m.set_gpus([])
    assert "GPU-x" not in generate_latest(m.registry).decode()


def test_gpu_metrics_busy_exports_only_gpus_with_a_share_and_off_none() -> None:
    """``gpu_metrics`` (issue 27: 40,000 series at 5,000 nodes): ``busy`` keeps a series
    only for a GPU carrying a predicted share — one that empties loses it, one that fills
    gets it — ``off`` exports none, and ``all`` an idle GPU's 0 too."""
    from prometheus_client import generate_latest

    from horus.operator.metrics import OperatorMetrics

    def series(m: OperatorMetrics) -> dict[str, str]:
        text = generate_latest(m.registry).decode()
        return {
            line.split('uuid="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
            for line in text.splitlines()
            if line.startswith("horus_gpu_predicted_utilization_ratio{")
        }

    rows = [("n1", 0, "GPU-a", 130.0), ("n1", 1, "GPU-b", 0.0), ("n2", 0, "GPU-c", 40.0)]
    every = OperatorMetrics()
    every.set_gpu_utils(rows)
    assert series(every) == {"GPU-a": "1.3", "GPU-b": "0.0", "GPU-c": "0.4"}
    busy = OperatorMetrics(gpus="busy")
    busy.set_gpu_utils(rows)
    assert series(busy) == {"GPU-a": "1.3", "GPU-c": "0.4"}
    busy.set_gpu_utils([("n1", 0, "GPU-a", 0.0), ("n1", 1, "GPU-b", 55.0), rows[2]])
    assert series(busy) == {"GPU-b": "0.55", "GPU-c": "0.4"}
    off = OperatorMetrics(gpus="off")
    off.set_gpu_utils(rows)
    assert series(off) == {}


def test_the_gpu_metrics_setting_reaches_the_metrics_and_refuses_other_values(
    tmp_path: Path,
) -> None:
    import argparse

    from horus.operator.commands import register
    from horus.operator.controller import Controller

    assert Controller(OperatorSettings()).metrics.gpus == "all"
    assert Controller(OperatorSettings(gpu_metrics="busy")).metrics.gpus == "busy"
    env = {"HORUS_OPERATOR_GPU_METRICS": "off"}
    assert load_settings(OperatorSettings, "operator", env=env).gpu_metrics == "off"
    file = tmp_path / "config.yaml"
    file.write_text("operator:\n  gpu_metrics: every\n")
    with pytest.raises(ConfigError, match=r"gpu_metrics.*not one of all, busy, off"):
        load_settings(OperatorSettings, "operator", env={}, config_file=file)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["operator", "run", "--gpu-metrics", "busy"]).gpu_metrics == "busy"
    with pytest.raises(SystemExit):
        parser.parse_args(["operator", "run", "--gpu-metrics", "some"])


def test_a_movable_job_knows_its_checkpoint_and_gets_its_grace_period() -> None:
    from horus.operator.podspec import pod_manifest

    obj = dljob("train", [share("n1", 0)], phase="Scheduled")
    obj["spec"]["migration"] = {
        "policy": "OnCheckpoint",
        "checkpointPath": "/ckpt/train",
        "gracePeriodSeconds": 90,
    }
    obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 10
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    pod = pod_manifest(obj, 0, obj["status"]["placements"])
    spec = pod["spec"]
    assert spec["terminationGracePeriodSeconds"] == 90
    assert spec["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": c.ENV_CHECKPOINT_PATH, "value": "/ckpt/train"},
    ]
    obj["spec"]["migration"] = {"policy": "Never"}  # not movable: the template as written
    pod = pod_manifest(obj, 0, obj["status"]["placements"])
    assert pod["spec"]["terminationGracePeriodSeconds"] == 10
    assert c.ENV_CHECKPOINT_PATH not in str(pod["spec"]["containers"][0]["env"])
