"""Pods of any owner: their workload identity, their profile from a ConfigMap they name, and
their measured pair speeds as metrics (``horus_pod_pair_speed_ratio``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

import pytest
from agent_helpers import (
    KEY,
    ROOT,
    NodeApiserver,
    assignment,
    pod,
    pod_obj,
    sim_agent_settings,
    write_public_keys,
)
from prometheus_client import generate_latest

from horus.agent.agent import Agent
from horus.agent.backend import GpuSample, NodeSample, PodSample
from horus.agent.exporter import Snapshot, make_registry
from horus.agent.jobinfo import JobLookups, configmap_ref
from horus.agent.kube import AgentApi
from horus.agent.pods import SkipLog, parse_pod
from horus.agent.progress import PairReading
from horus.agent.workload import workload_identity
from horus.api.assignment import PredictedUsage
from horus.common import constants as c
from horus.common.errors import ValidationError
from kube_fakes import RawResponse
from signing_keys import sign_pod

BERT = (ROOT / "examples" / "profiles" / "bert-base-bs16.yaml").read_text()
RESNET = (ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()


# --- the workload identity ------------------------------------------------------------------


def _owner(kind: Any, name: Any, controller: Any = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": "u", "controller": controller}


@pytest.mark.parametrize(
    ("meta", "job", "want"),
    [
        ({"name": "train-0"}, "train", "train"),  # a DLJob replica
        (
            {
                "name": "p",
                "annotations": {c.ANNOTATION_KUEUE_WORKLOAD: "job-train-3c1f/0d9e-uid"},
                "labels": {c.LABEL_GANG_NAME: "g", c.KUEUE_PODSET_LABEL: "main"},
                "ownerReferences": [_owner("Job", "train")],
            },
            None,
            "job-train-3c1f",
        ),
        (
            {
                "name": "p",
                "labels": {c.LABEL_GANG_NAME: "allreduce"},
                "ownerReferences": [_owner("JobSet", "js")],
            },
            None,
            "gang/allreduce",
        ),
        (
            {"name": "web-7d9f-x2", "ownerReferences": [_owner("ReplicaSet", "web-7d9f")]},
            None,
            "ReplicaSet/web-7d9f",
        ),
        (
            {"name": "p", "ownerReferences": [_owner("Foo", "f", False), _owner("Job", "train")]},
            None,
            "Job/train",
        ),
        ({"name": "lonely"}, None, "Pod/lonely"),
        ({"name": "p", "ownerReferences": [_owner("Job", "x", False)]}, None, "Pod/p"),
    ],
)
def test_workload_identity(meta: dict[str, Any], job: str | None, want: str) -> None:
    assert workload_identity(meta, job) == want


@pytest.mark.parametrize(
    "meta",
    [
        {"name": "p", "annotations": {c.ANNOTATION_KUEUE_WORKLOAD: "x" * 300 + "/uid"}},
        {"name": "p", "annotations": {c.ANNOTATION_KUEUE_WORKLOAD: '"} 1\nfake{a="'}},
        {"name": "p", "annotations": {c.ANNOTATION_KUEUE_WORKLOAD: ["not", "a", "string"]}},
        {"name": "p", "annotations": "not a map", "labels": ["nor", "this"]},
        {"name": "p", "labels": {c.LABEL_GANG_NAME: "bad name with spaces"}},
        {"name": "p", "ownerReferences": "not a list"},
        {"name": "p", "ownerReferences": [_owner("Job/../x", "train")]},
        {"name": "p", "ownerReferences": [_owner("Job", "")]},
        {"name": "p", "ownerReferences": [_owner("Job", {"deep": 1})]},
        {"name": "p", "ownerReferences": [_owner("Job", "x", "true")]},  # not the boolean
        {"name": "p", "ownerReferences": [_owner("Bad Kind", "a"), _owner("Job", "b")]},
        {"name": "p", "ownerReferences": [7, None] * 1000},
    ],
)
def test_hostile_fields_fall_back_to_the_pod_itself(meta: dict[str, Any]) -> None:
    """Tenants write every field the identity reads: a value that is no plausible name is
    passed over, never copied into a label."""
    assert workload_identity(meta, None) == "Pod/p"
    assert workload_identity({"name": {"x": 1}}, "bad job name") == "Pod/?"


def test_pod_info_carries_the_workload_and_the_configmap_reference() -> None:
    obj = pod_obj("web-1", extra={c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "bert/profile.json"})
    obj["metadata"]["ownerReferences"] = [_owner("ReplicaSet", "web-7d9f")]
    info = parse_pod(obj, SkipLog())
    assert info is not None
    assert info.workload == "ReplicaSet/web-7d9f"
    assert info.profile_configmap == "bert/profile.json"
    dljob = parse_pod(pod_obj("train-0", assign=assignment(job="train")), SkipLog())
    assert dljob is not None and dljob.workload == "train"


# --- the profile from a ConfigMap the pod names ---------------------------------------------


class FakeApi:
    """The two reads JobLookups makes, counted."""

    def __init__(self, configmaps: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.configmaps = configmaps
        self.calls: list[tuple[str, str]] = []

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append((namespace, name))
        return self.configmaps.get((namespace, name))

    def dljob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def _plain(name: str, ref: str | None, inline: str | None = None) -> Any:
    from dataclasses import replace

    return replace(pod(name), profile_configmap=ref, graph_profile=inline)


def test_a_plain_pods_profile_comes_from_the_configmap_it_names() -> None:
    api = FakeApi(
        {
            ("ns", "bert"): {"data": {c.PROFILE_CONFIGMAP_DEFAULT_KEY: BERT}},
            ("ns", "many"): {"data": {"resnet.yaml": RESNET}},
        }
    )
    jobs = JobLookups(cast(AgentApi, api), SkipLog())
    a = jobs.profile(_plain("a", "bert"))
    assert a is not None and (a.model, a.batch_size) == ("bert-base", 16)
    b = jobs.profile(_plain("b", "many/resnet.yaml"))
    assert b is not None and b.model == "resnet50"
    # the replicas of one Deployment share one read (cached like the DLJob path)
    assert jobs.profile(_plain("c", "bert")) is a
    assert api.calls == [("ns", "bert"), ("ns", "many")]
    # an inline profile wins over the ConfigMap
    d = jobs.profile(_plain("d", "bert", inline=RESNET))
    assert d is not None and d.model == "resnet50"


@pytest.mark.parametrize(
    ("configmaps", "ref", "said"),
    [
        ({}, "gone", "ConfigMap ns/gone"),
        ({("ns", "cm"): {"data": {}}}, "cm/other.yaml", "no key 'other.yaml'"),
        ({("ns", "cm"): {"data": "not a map"}}, "cm", "no key 'profile.yaml'"),
        ({("ns", "cm"): {"data": {"profile.yaml": "{not: [yaml"}}}, "cm", "configmap ns/cm"),
        ({}, "../../secrets/x", c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP),
    ],
)
def test_a_configmap_that_cannot_be_read_is_a_warning_not_a_crash(
    configmaps: dict[tuple[str, str], dict[str, Any]],
    ref: str,
    said: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = JobLookups(cast(AgentApi, FakeApi(configmaps)), SkipLog())
    with caplog.at_level(logging.WARNING):
        assert jobs.profile(_plain("a", ref)) is None
        assert jobs.profile(_plain("a", ref)) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "pod ns/a: no graph profile" in warnings[0]
    assert said in warnings[0]


def test_configmap_ref() -> None:
    assert configmap_ref("bert") == ("bert", c.PROFILE_CONFIGMAP_DEFAULT_KEY)
    assert configmap_ref("bert/p.json") == ("bert", "p.json")
    assert configmap_ref("bert/") == ("bert", c.PROFILE_CONFIGMAP_DEFAULT_KEY)
    for bad in ("", "/k", "Bert", "a/b/c", "x" * 254, "a/k;rm"):
        with pytest.raises(ValidationError, match="graph-profile-configmap"):
            configmap_ref(bad)


# --- the metric -----------------------------------------------------------------------------


def _series(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(name + "{")]


def test_a_measured_pair_speed_is_a_series_with_its_workload() -> None:
    registry, collector = make_registry()
    from dataclasses import replace

    p = replace(pod("web-1"), workload="ReplicaSet/web-7d9f")
    sample = NodeSample(
        "n1",
        "nvml",
        [GpuSample(0, "GPU-x", "H100", 0.4, 1e9, 8e10)],
        {p.uid: PodSample(1e9, 0.38)},
    )
    reading = PairReading(0.62, 7, 0.05, c.PAIR_SOURCE_PROGRESS)
    collector.update(
        Snapshot([sample], {p.uid: p}, pairs={p.uid: {("bert-base@16", "H100"): reading}})
    )
    text = generate_latest(registry).decode()
    labels = (
        'backend="nvml",gpu="0",model="H100",namespace="ns",neighbour="bert-base@16",'
        'node="n1",pod="web-1",source="progress",workload="ReplicaSet/web-7d9f"'
    )
    assert f"{c.METRIC_POD_PAIR_SPEED}{{{labels}}} 0.62" in text
    assert f"{c.METRIC_POD_PAIR_SPEED_ERROR}{{{labels}}} 0.05" in text
    assert 'workload="ReplicaSet/web-7d9f"' in _series(text, c.METRIC_POD_GPU_CORE_SHARE)[0]
    # the pod gone: its series go with the next snapshot
    collector.update(Snapshot([], {}))
    text = generate_latest(registry).decode()
    assert not _series(text, c.METRIC_POD_PAIR_SPEED) and 'pod="web-1"' not in text


# --- the whole agent: plain pods, one with its profile in a ConfigMap --------------------------

NODE = "n1"


class ApiserverWithConfigMap(NodeApiserver):
    """The node's apiserver, also serving ConfigMap ``ns/bert-profile``."""

    def call_api(self, method: str, path: str, *args: Any, **kw: Any) -> RawResponse:
        if method == "GET" and path == "/api/v1/namespaces/ns/configmaps/bert-profile":
            body = {"metadata": {"name": "bert-profile"}, "data": {"profile.yaml": BERT}}
            return RawResponse(200, json.dumps(body).encode())
        return super().call_api(method, path, *args, **kw)


def _plain_pod(name: str, annotations: dict[str, str], owner: dict[str, Any] | None) -> Any:
    obj = pod_obj(
        name,
        NODE,
        assignment(NODE, 0, core=50),
        sign=False,
        predicted=PredictedUsage(80.0, 80.0, 1000.0, 1000.0, "test"),
    )
    obj["metadata"]["annotations"].update(annotations)
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [owner]
    return sign_pod(obj, KEY)


def test_the_agent_exports_a_plain_pods_pair_speed_by_workload(tmp_path: Path) -> None:
    """A Job's pod alone, then beside a Deployment's pod whose profile is in a ConfigMap: the
    Job's pod gets a measured speed beside the neighbour's kind (known only from the
    ConfigMap), labelled with its workload; once the pods go, so do the series."""
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    settings = sim_agent_settings(NODE, key_file)
    settings = type(settings)(**{**settings.__dict__, "noise": 0.0})
    api = ApiserverWithConfigMap(NODE)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    api.pods = [
        _plain_pod("train-x1", {c.ANNOTATION_GRAPH_PROFILE: RESNET}, _owner("Job", "train"))
    ]
    for _ in range(3):
        agent.cycle()
    api.pods.append(
        _plain_pod(
            "web-7d9f-q",
            {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "bert-profile"},
            _owner("ReplicaSet", "web-7d9f"),
        )
    )
    for _ in range(3):
        agent.cycle()
    text = generate_latest(agent.registry).decode()
    (line,) = _series(text, c.METRIC_POD_PAIR_SPEED)
    assert 'pod="train-x1"' in line and 'workload="Job/train"' in line
    assert 'neighbour="bert-base@16"' in line and 'source="utilisation"' in line
    speed = float(line.rsplit(" ", 1)[1])
    assert 0.05 <= speed < 1.0  # two pods wanting 80 % each share one GPU
    shares = _series(text, c.METRIC_POD_GPU_CORE_SHARE)
    assert any('workload="ReplicaSet/web-7d9f"' in ln for ln in shares)
    # no DLJob among them: nothing to write into a status, the metric is where it shows
    assert agent.feedback.job_observed() == {}
    api.pods = []
    agent.cycle()
    text = generate_latest(agent.registry).decode()
    assert not _series(text, c.METRIC_POD_PAIR_SPEED)
    assert not _series(text, c.METRIC_POD_PAIR_SPEED_ERROR)
