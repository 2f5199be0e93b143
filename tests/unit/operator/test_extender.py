"""The scheduler extender's verbs: wire shapes of k8s.io/kube-scheduler/extender/v1, the Horus
decisions behind them (reasons per node, scores 0..10), and bind's assignment-then-binding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from extfixtures import FakeSource, plain_pod
from opfixtures import KEY, assignment, dljob, node, share, sign_pod

from horus.api.assignment import decode_assignment, decode_predicted
from horus.api.podassignment import read_pod_assignment
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.common.errors import ConfigError, ValidationError
from horus.operator.extender import (
    BindingArgs,
    Extender,
    ExtenderSettings,
    NodeVerdict,
    RequestError,
    parse_binding_args,
    parse_extender_args,
    pod_demand,
)
from horus.predictor import load_default_predictor


def running(name: str, node_name: str, core: int, mem: int) -> dict[str, Any]:
    p = plain_pod(name, core=core, memory=mem, node=node_name)
    p["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = json.dumps(
        assignment(node_name, 0, core, mem).to_json()
    )
    p["status"]["phase"] = "Running"
    return sign_pod(p)


@pytest.fixture
def source() -> FakeSource:
    return FakeSource(
        [
            node("idle", gpus=1),
            node("shared", gpus=1),
            {"metadata": {"name": "cpu-only"}, "status": {}},
            node("full", gpus=1),
            node("down", gpus=1, ready=False),
        ],
        [
            running("busy", "shared", 50, 20000),
            running("hog", "full", 50, 80000),
            plain_pod("p"),
        ],
    )


@pytest.fixture
def ext(source: FakeSource) -> Extender:
    return Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)


NODES = ["idle", "shared", "cpu-only", "full", "down"]


def args_for(source: FakeSource, name: str = "p", names: list[str] | None = None) -> Any:
    return parse_extender_args({"Pod": source.pods[("default", name)], "NodeNames": names or NODES})


# --- request parsing ---------------------------------------------------------------------------


def test_node_names_form_and_case_insensitive_fields() -> None:
    pod = plain_pod("p")
    a = parse_extender_args({"pod": pod, "nodenames": ["n1", "n2"]})
    assert a.node_names == ("n1", "n2") and a.nodes is None
    assert (a.namespace, a.name) == ("default", "p")


def test_nodes_form_keeps_objects() -> None:
    items = [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]
    a = parse_extender_args({"Pod": plain_pod("p"), "Nodes": {"items": items}, "NodeNames": None})
    assert a.node_names == ("n1", "n2") and a.nodes is not None and len(a.nodes) == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "request body: must be a JSON object, got list"),
        ({"NodeNames": ["a"]}, "Pod: required"),
        ({"Pod": None, "NodeNames": ["a"]}, "Pod: required"),
        ({"Pod": "x", "NodeNames": ["a"]}, "Pod: must be a JSON object, got str"),
        ({"Pod": {"spec": {"containers": []}}, "NodeNames": []}, "Pod.metadata: must be"),
        (
            {"Pod": {"metadata": {}, "spec": {"containers": []}}, "NodeNames": []},
            "Pod.metadata.name",
        ),
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": []}, "Pod.spec: must be"),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": []},
            "Pod.spec.containers: required",
        ),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": {}}}, "NodeNames": []},
            "Pod.spec.containers: must be a list",
        ),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [1]}}, "NodeNames": []},
            "Pod.spec.containers[0]: must be a JSON object",
        ),
        (
            {
                "Pod": {
                    "metadata": {"name": "p"},
                    "spec": {"containers": [{"resources": {"requests": [1]}}]},
                },
                "NodeNames": [],
            },
            "Pod.spec.containers[0].resources.requests: must be a JSON object",
        ),
        (
            {
                "Pod": {
                    "metadata": {"name": "p", "annotations": {"a": 1}},
                    "spec": {"containers": []},
                },
                "NodeNames": [],
            },
            "Pod.metadata.annotations['a']: must be a string",
        ),
        ({"Pod": plain_pod("p")}, "NodeNames or Nodes: one is required"),
        ({"Pod": plain_pod("p"), "NodeNames": "a"}, "NodeNames: must be a list"),
        (
            {"Pod": plain_pod("p"), "NodeNames": ["a", 3]},
            "NodeNames[1]: must be a non-empty string",
        ),
        ({"Pod": plain_pod("p"), "Nodes": {"items": [{}]}}, "Nodes.items[0].metadata: must be"),
        ({"Pod": plain_pod("p"), "Nodes": {"items": 3}}, "Nodes.items: must be a list"),
    ],
)
def test_bad_extender_args_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_extender_args(body)
    assert message in str(err.value)


def test_binding_args() -> None:
    b = parse_binding_args({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"})
    assert b == BindingArgs("p", "ns", "u", "n")
    assert parse_binding_args({"podname": "p", "podnamespace": "ns", "node": "n"}).pod_uid == ""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "request body: must be a JSON object, got null"),
        ({"PodNamespace": "ns", "Node": "n"}, "PodName: required"),
        ({"PodName": "p", "PodNamespace": "ns", "Node": 3}, "Node: must be a non-empty string"),
        ({"PodName": "", "PodNamespace": "ns", "Node": "n"}, "PodName: must be a non-empty string"),
        ({"PodName": "p", "PodNamespace": "ns", "PodUID": 5, "Node": "n"}, "PodUID: must be"),
    ],
)
def test_bad_binding_args_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_binding_args(body)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("40", 40), (40, 40), ("1k", 1000), ("2Ki", 2048), ("1000m", 1), ("+7", 7), ("1.0", 1)],
)
def test_quantities(value: object, expected: int) -> None:
    assert parse_quantity(value, "q") == expected


@pytest.mark.parametrize("value", ["1.5", "abc", "500m", "", True, None, 1.5, "1Xi"])
def test_bad_quantities(value: object) -> None:
    with pytest.raises(ValidationError) as err:
        parse_quantity(value, "spec.containers[0]")
    assert "spec.containers[0]" in str(err.value)


def test_settings_validate() -> None:
    assert ExtenderSettings().port == 8888
    with pytest.raises(ConfigError, match="policy"):
        ExtenderSettings(policy="nope")
    with pytest.raises(ConfigError, match="port"):
        ExtenderSettings(port=70000)


# --- what a pod asks for -----------------------------------------------------------------------


def test_demand_of_plain_pods() -> None:
    assert not pod_demand({"metadata": {"name": "x"}, "spec": {"containers": [{}]}}).interested
    d = pod_demand(plain_pod("p", core=30, memory=None))
    assert d.request is not None and d.request.core_percent == 30 and d.request.memory_mib is None
    assert d.request.name == "pod:default/p"


def test_init_containers_asking_for_gpu_shares_are_refused() -> None:
    """The device plugin hands a pod's share out once, to the container admitted first; an
    init container asking for it would leave the app container refused at admission, so the
    pod could never start: it is refused here, with the reason (issue 20)."""
    pod = plain_pod("p", core=20, memory=1000)
    pod["spec"]["containers"].append({"name": "side", "image": "busybox"})  # asks for no GPU
    pod["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {c.RESOURCE_GPU_CORE: "60"}}}
    ]
    d = pod_demand(pod)
    assert d.interested and d.request is None and d.problem is not None
    assert "init container(s) init request Horus GPU resources" in d.problem
    assert "never in initContainers" in d.problem
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]  # asks for none
    d = pod_demand(pod)
    assert d.request is not None and d.request.core_percent == 20


def test_two_containers_asking_for_gpu_shares_are_refused() -> None:
    pod = plain_pod("p", core=20, memory=1000)
    ctr = pod["spec"]["containers"][0]
    pod["spec"]["containers"].append({**ctr, "name": "side"})
    d = pod_demand(pod)
    assert d.interested and d.request is None and d.problem is not None
    assert "all request Horus GPU resources" in d.problem and "side" in d.problem


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (plain_pod("p", profile=None), "has no horus.io/graph-profile annotation"),
        (plain_pod("p", core=150), "horus.io/gpu-core=150"),
        (plain_pod("p", core="1.5"), "is not a whole number"),
        (
            plain_pod("p", profile=None, annotations={c.ANNOTATION_GRAPH_PROFILE: "features: 3"}),
            "annotation horus.io/graph-profile",
        ),
        (
            plain_pod("p", profile=None, annotations={c.ANNOTATION_GRAPH_PROFILE: "{: nope"}),
            "not valid JSON or YAML",
        ),
    ],
)
def test_demand_problems_are_sentences(pod: dict[str, Any], message: str) -> None:
    d = pod_demand(pod)
    assert d.interested and d.request is None and d.problem is not None
    assert d.problem.startswith("horus: ") and message in d.problem


# --- filter / prioritize -----------------------------------------------------------------------


def test_filter_passes_fitting_nodes_and_explains_the_rest(
    ext: Extender, source: FakeSource
) -> None:
    out = ext.filter(args_for(source))
    assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert out["Error"] == "" and out["Nodes"] is None
    assert out["NodeNames"] == ["idle", "shared"]
    assert out["FailedNodes"]["full"].startswith("horus: no GPU with 9.8 GiB free")
    assert "full/gpu-0" in out["FailedNodes"]["full"]
    assert "NotReady" in out["FailedNodes"]["down"]
    assert "no horus.io/gpu-inventory" in out["FailedAndUnresolvableNodes"]["cpu-only"]


def test_filter_nodes_form_returns_node_objects(ext: Extender, source: FakeSource) -> None:
    items = [{"metadata": {"name": n}} for n in NODES]
    args = parse_extender_args({"Pod": source.pods[("default", "p")], "Nodes": {"items": items}})
    out = ext.filter(args)
    assert out["NodeNames"] is None
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["idle", "shared"]


def test_too_big_for_every_gpu_is_unresolvable(ext: Extender, source: FakeSource) -> None:
    source.pods[("default", "big")] = plain_pod("big", memory=200000)
    out = ext.filter(args_for(source, "big", ["idle", "shared"]))
    assert out["NodeNames"] == []
    for reason in out["FailedAndUnresolvableNodes"].values():
        assert "largest GPU has 80.0 GiB" in reason


def test_pod_problem_fails_every_node_unresolvably(ext: Extender, source: FakeSource) -> None:
    source.pods[("default", "np")] = plain_pod("np", profile=None)
    out = ext.filter(args_for(source, "np", ["idle", "shared"]))
    assert out["NodeNames"] == [] and out["FailedNodes"] == {}
    assert set(out["FailedAndUnresolvableNodes"]) == {"idle", "shared"}


def test_pods_without_horus_resources_pass_everywhere(ext: Extender) -> None:
    pod = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}
    args = parse_extender_args({"Pod": pod, "NodeNames": ["idle", "cpu-only"]})
    assert ext.filter(args)["NodeNames"] == ["idle", "cpu-only"]
    assert ext.prioritize(args) == [{"Host": "idle", "Score": 0}, {"Host": "cpu-only", "Score": 0}]


def test_prioritize_prefers_the_idle_gpu(ext: Extender, source: FakeSource) -> None:
    scores = {h["Host"]: h["Score"] for h in ext.prioritize(args_for(source))}
    assert set(scores) == set(NODES)
    assert scores["idle"] == 10
    assert 0 <= scores["shared"] < scores["idle"]
    assert scores["full"] == scores["cpu-only"] == scores["down"] == 0
    assert all(isinstance(v, int) and 0 <= v <= 10 for v in scores.values())


def test_verdict_scores_are_clamped() -> None:
    assert NodeVerdict("n").score == 0
    assert NodeVerdict("n", reason="x").score == 0


def test_listing_failure_is_an_error_not_a_crash(ext: Extender, source: FakeSource) -> None:
    source.fail_list = True
    out = ext.filter(args_for(source))
    assert "apiserver unreachable" in out["Error"]
    assert ext.prioritize(args_for(source))[0] == {"Host": "idle", "Score": 0}


def test_filter_results_are_cached_for_prioritize(source: FakeSource) -> None:
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=60)
    first = ext.evaluate(source.pods[("default", "p")], NODES)
    source.fail_list = True  # a second listing would fail
    assert ext.evaluate(source.pods[("default", "p")], NODES) is first


def test_only_the_newest_pods_verdicts_are_kept(source: FakeSource) -> None:
    """kube-scheduler asks filter then prioritize for one pod at a time: the verdicts of the
    last few pods are kept, not every pod's of the last seconds (a burst kept thousands of
    objects alive, and the collector's full passes over them were the extender's p99)."""
    from horus.operator.extender.decisions import VERDICT_CACHE_PODS

    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=60)
    pods = [plain_pod(f"q{i}") for i in range(VERDICT_CACHE_PODS + 3)]
    answers = [ext.evaluate(p, NODES) for p in pods]
    assert ext.evaluate(pods[-1], NODES) is answers[-1]  # prioritize of the newest: cached
    assert ext.evaluate(pods[0], NODES) is not answers[0]  # the oldest was let go
    assert ext.evaluate(pods[0], NODES) == answers[0]  # and is answered alike again


# --- bind --------------------------------------------------------------------------------------


def test_bind_writes_signed_assignment_then_binds(ext: Extender, source: FakeSource) -> None:
    assert ext.bind(BindingArgs("p", "default", "uid-p", "idle")) == {"Error": ""}
    assert [call[0] for call in source.calls] == ["patch", "bind"]  # assignment first
    pod = source.pods[("default", "p")]
    ann = pod["metadata"]["annotations"]
    text = ann[c.ANNOTATION_GPU_ASSIGNMENT]
    a = decode_assignment(text)
    assert (a.node, a.gpu_index, a.core_percent, a.memory_mib) == ("idle", 0, 40, 10000)
    assert a.job is None
    read = read_pod_assignment(pod, KEY)  # signed for exactly this pod's UID, no job, epoch 0
    assert read.trusted and read.epoch == 0
    assert decode_predicted(ann[c.ANNOTATION_PREDICTED]).model_version
    assert pod["spec"]["nodeName"] == "idle"
    # the share now counts: a second pod asking for the rest of the memory no longer fits
    source.pods[("default", "q")] = plain_pod("q", core=40, memory=75000)
    out = ext.filter(args_for(source, "q", ["idle"]))
    assert "idle" in out["FailedNodes"]


def test_bind_is_idempotent_and_checks_identity(ext: Extender, source: FakeSource) -> None:
    assert ext.bind(BindingArgs("p", "default", "uid-p", "idle"))["Error"] == ""
    assert ext.bind(BindingArgs("p", "default", "uid-p", "idle"))["Error"] == ""  # retried
    assert (
        "already bound to node idle" in ext.bind(BindingArgs("p", "default", "", "shared"))["Error"]
    )
    assert "no longer exists" in ext.bind(BindingArgs("gone", "default", "", "idle"))["Error"]
    source.pods[("default", "r")] = plain_pod("r")
    assert "was replaced" in ext.bind(BindingArgs("r", "default", "other-uid", "idle"))["Error"]


def test_bind_refuses_a_node_that_no_longer_fits(ext: Extender, source: FakeSource) -> None:
    err = ext.bind(BindingArgs("p", "default", "uid-p", "full"))["Error"]
    assert "cannot take it any more" in err and "9.8 GiB" in err
    assert source.calls == []  # nothing written
    err = ext.bind(BindingArgs("p", "default", "uid-p", "cpu-only"))["Error"]
    assert "no Horus GPUs" in err


def test_bind_failure_rolls_back_the_assignment(ext: Extender, source: FakeSource) -> None:
    source.fail_bind = True
    err = ext.bind(BindingArgs("p", "default", "uid-p", "idle"))["Error"]
    assert "binding refused" in err
    ann = source.pods[("default", "p")]["metadata"]["annotations"]
    assert c.ANNOTATION_GPU_ASSIGNMENT not in ann and c.ANNOTATION_ASSIGNMENT_SIGNATURE not in ann


def test_retried_bind_replaces_its_own_earlier_assignment(
    ext: Extender, source: FakeSource
) -> None:
    # a crash after the assignment was written, before the binding: the record stays ...
    pod = source.pods[("default", "p")]
    pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = json.dumps(
        assignment("idle", 0, 40, 10000).to_json()
    )
    # ... and does not count against the pod itself when it is bound again
    assert ext.bind(BindingArgs("p", "default", "uid-p", "idle"))["Error"] == ""


def test_bind_of_a_pod_without_horus_resources_is_refused(
    ext: Extender, source: FakeSource
) -> None:
    """Issue 24: /bind binds only pods that ask for Horus GPUs — any other pod would be put on
    whatever node the caller names with the operator's pods/binding (taints skipped)."""
    source.pods[("default", "web")] = {
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "c"}]},
    }
    err = ext.bind(BindingArgs("web", "default", "", "cpu-only"))["Error"]
    assert "requests no Horus resource" in err
    assert source.calls == []


def test_lost_race_backs_off(source: FakeSource) -> None:
    """Another placer wrote the same GPU between our decision and our write."""

    class Racing(FakeSource):
        def patch_pod_annotations(self, namespace, name, annotations, resource_version=None):  # type: ignore[no-untyped-def]
            if annotations.get(c.ANNOTATION_GPU_ASSIGNMENT) and "rival" not in str(self.pods):
                rival = running("rival", "idle", 80, 70000)
                rival["metadata"]["name"] = "a-rival"  # listed before us: its share counts
                sign_pod(rival)
                self.pods[("default", "a-rival")] = rival
                self.pods = dict(sorted(self.pods.items()))
            return super().patch_pod_annotations(namespace, name, annotations, resource_version)

    racing = Racing(source.nodes, list(source.pods.values()))
    ext = Extender(racing, load_default_predictor(), key=KEY)
    err = ext.bind(BindingArgs("p", "default", "uid-p", "idle"))["Error"]
    assert "taken by another placement" in err
    assert (
        c.ANNOTATION_GPU_ASSIGNMENT not in racing.pods[("default", "p")]["metadata"]["annotations"]
    )
    assert all(call[0] != "bind" for call in racing.calls)


def test_gpu_memory_is_counted_in_the_nodes_units() -> None:
    """A node whose device plugin counts horus.io/gpu-memory in 128 MiB units."""
    chunky = node("chunky", gpus=1)
    chunky["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_UNIT] = "128"
    broken = node("broken", gpus=1)
    broken["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_UNIT] = "lots"
    source = FakeSource([chunky, broken], [plain_pod("p", core=40, memory=80)])
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    out = ext.filter(args_for(source, "p", ["chunky", "broken"]))
    assert out["NodeNames"] == ["chunky"]
    assert "gpu-memory-unit-mib must be a whole number" in out["FailedNodes"]["broken"]
    assert ext.bind(BindingArgs("p", "default", "uid-p", "chunky")) == {"Error": ""}
    ann = source.pods[("default", "p")]["metadata"]["annotations"]
    assert decode_assignment(ann[c.ANNOTATION_GPU_ASSIGNMENT]).memory_mib == 80 * 128


def test_profiles_are_parsed_once_per_text() -> None:
    from horus.operator.extender import cached_profile

    text = plain_pod("x")["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE]
    assert cached_profile(text) is cached_profile(text)
    for _ in range(2):  # a bad document fails every time, with its reason
        with pytest.raises(ValidationError, match="features"):
            cached_profile("model: m\nbatchSize: 1\n")


def test_measured_pair_speeds_beat_predicted_ones() -> None:
    """A pair speed a node agent measured (a DLJob's status.observed.pairs, here of a finished
    job) replaces the predicted one, as in the operator: resnet50 measured at 0.31× next to
    resnet50 makes node a, which runs one, a bad place for another; node b stays fine."""

    def resident(name: str, node_name: str, profile: str) -> dict[str, Any]:
        p = plain_pod(name, core=40, memory=10000, node=node_name, profile=profile)
        p["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = json.dumps(
            assignment(node_name, 0, 40, 10000).to_json()
        )
        p["status"]["phase"] = "Running"
        return sign_pod(p)

    def filtered(jobs: list[dict[str, Any]]) -> dict[str, Any]:
        src = FakeSource(
            [node("a", gpus=1), node("b", gpus=1)],
            [
                resident("r1", "a", "resnet50-bs64"),
                resident("r2", "b", "lstm-lm-bs20"),
                plain_pod("p"),
            ],
            jobs,
        )
        ext = Extender(src, load_default_predictor(), key=KEY, cache_seconds=0)
        pod = src.pods[("default", "p")]
        return ext.filter(parse_extender_args({"Pod": pod, "NodeNames": ["a", "b"]}))

    assert filtered([])["NodeNames"] == ["a", "b"]  # predicted: sharing either GPU pays
    old = dljob("old", [share("a", 0)], phase="Succeeded")
    old["status"]["observed"] = {
        "pairs": [{"other": "resnet50@64", "gpuModel": "H100", "speed": 0.31, "samples": 9}]
    }
    out = filtered([old])
    assert out["NodeNames"] == ["b"]
    assert "gains -0.38" in out["FailedNodes"]["a"] and "0.31×" in out["FailedNodes"]["a"]


def test_bind_waits_while_a_twin_awaits_its_allocate_on_a_real_kubelet() -> None:
    """A real kubelet's Allocate names no pod: while a pod with the same request waits for
    its GPU on the node, a second one is not bound there (the scheduler retries)."""
    real = node("r1", gpus=2)
    real["status"]["nodeInfo"] = {"kubeletVersion": "v1.37.2"}
    twin = plain_pod("twin", core=30, memory=8000, node="r1")
    twin["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = json.dumps(
        assignment("r1", 0, 30, 8000).to_json()
    )
    sign_pod(twin)
    source = FakeSource([real], [twin, plain_pod("p", core=30, memory=8000)])
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    err = ext.bind(BindingArgs("p", "default", "uid-p", "r1"))["Error"]
    assert "still awaits its GPU on node r1" in err
    assert all(call[0] != "bind" for call in source.calls)
    source.pods[("default", "twin")]["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED] = (
        json.dumps({c.RESOURCE_GPU_CORE: ["x"], c.RESOURCE_GPU_MEMORY: ["y"]})
    )
    assert ext.bind(BindingArgs("p", "default", "uid-p", "r1")) == {"Error": ""}


def test_bind_waits_for_a_twin_with_equal_core_and_other_memory() -> None:
    """Equal core % and different memory: the kubelet's gpu-core Allocate could pick either
    pod, so the extender holds the second bind too (issue 25, "Twins")."""
    real = node("r1", gpus=2)
    real["status"]["nodeInfo"] = {"kubeletVersion": "v1.37.2"}
    twin = plain_pod("twin", core=30, memory=8000, node="r1")
    twin["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = json.dumps(
        assignment("r1", 0, 30, 8000).to_json()
    )
    sign_pod(twin)
    source = FakeSource([real], [twin, plain_pod("p", core=30, memory=4000)])
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    err = ext.bind(BindingArgs("p", "default", "uid-p", "r1"))["Error"]
    assert "same gpu-core or gpu-memory amount still awaits its GPU on node r1" in err
    assert all(call[0] != "bind" for call in source.calls)
