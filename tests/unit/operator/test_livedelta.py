"""The incrementally kept live state equals a full rebuild after every change (differential).

A random cluster of nodes, DLJobs (signed and unsigned records, finished, moving) and pods
(plain, a DLJob's replicas, orphans, over-committing, unreadable, terminal) changes one step
at a time the way the watch-fed view changes — an object replaced in its place, deleted, or
added at the end — and after each step :class:`LiveDelta` must give what
:func:`build_live_state` gives for the same objects: every GPU's counters (the utilisation
sum to the bit), its residents in order, the jobs and residents, problems and measured pairs;
and the extender must answer every probe pod alike through either.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from extfixtures import plain_pod
from opfixtures import assignment, dljob, node, pod, profile_doc, share

from horus.common import constants as c
from horus.operator.extender import Extender, parse_extender_args
from horus.operator.livedelta import LiveDelta
from horus.operator.livestate import LiveObjects, LiveState, build_live_state
from horus.predictor import load_default_predictor
from signing_keys import KEY, sign_pod

NODES = ["n0", "n1", "n2", "n3"]
GPUS = 8


def _snapshot(live: LiveState) -> dict[str, Any]:
    st = live.state
    return {
        "mem": st.mem_used.tolist(),
        "core": st.core_used.tolist(),
        "util": st.util_sum.tolist(),
        "njobs": st.njobs.tolist(),
        "healthy": st.healthy.tolist(),
        "sig": [st.signatures[int(s)] for s in st.sig_id],
        "on_gpu": [[(r.job, r.kind, r.core, r.memory, r.util) for r in rs] for rs in st.residents],
        "jobs": [(k, v.request, v.prediction, v.gpus) for k, v in st.jobs.items()],
        "residents": list(live.residents.items()),
        "excluded": live.excluded_nodes,
        "problems": live.problems,
        "pairs": live.observed_pairs,
    }


def _profiled(p: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    name = rng.choice(["resnet50-bs64", "mobilenetv2-cifar-bs128", "lstm-lm-bs20"])
    p["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE] = json.dumps(profile_doc(name))
    return p


def _random_pod(rng: random.Random, i: int, jobs: list[str]) -> dict[str, Any]:
    n, g = rng.choice(NODES), rng.randrange(GPUS)
    core, mem = rng.choice([10, 20, 30, 60]), rng.choice([2000, 8000, 30000])
    roll = rng.random()
    if roll < 0.08:
        return pod(f"p{i}", None)  # no assignment: not counted, nothing said
    if roll < 0.16:
        return pod(f"p{i}", assignment(n, g, core, mem), phase="Succeeded")
    if roll < 0.22:
        bad = pod(f"p{i}", assignment(n, g, core, mem))
        bad["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = "{not json"
        return bad
    if roll < 0.28:
        forged = pod(f"p{i}", assignment(n, g, core, mem))
        forged["metadata"]["annotations"][c.ANNOTATION_ASSIGNMENT_SIGNATURE] = "AAAA"
        return forged
    if roll < 0.55 and jobs:
        job = rng.choice(jobs)
        replica = rng.randrange(2)
        return pod(
            f"{job}-{replica}-{i}",
            assignment(n, g, core, mem, job=job, replica=replica),
            job=job,
            replica=replica,
        )
    return _profiled(pod(f"p{i}", assignment(n, g, core, mem)), rng)


def _random_dljob(rng: random.Random, name: str) -> dict[str, Any]:
    roll = rng.random()
    shares = [share(rng.choice(NODES), rng.randrange(GPUS), rng.choice([20, 50]), 8000)]
    if roll < 0.15:
        return dljob(name)  # queued: no record
    if roll < 0.3:
        return dljob(name, shares, phase="Succeeded")
    obj = dljob(name, shares, phase="Running")
    if roll < 0.4:
        obj["status"]["placements"][0]["corePercent"] = 10  # changed after signing
    elif roll < 0.5:
        obj["status"]["observed"] = {
            "pairs": [{"other": "k", "gpuModel": "H100", "speed": 0.8, "error": 0.05}]
        }
    return obj


def _nodes() -> list[dict[str, Any]]:
    out = [node(n, gpus=GPUS) for n in NODES]
    out.append(node("down", gpus=GPUS, ready=False))
    return out


def _step(
    rng: random.Random,
    pods: dict[str, dict[str, Any]],
    jobs: dict[str, dict[str, Any]],
    i: int,
) -> None:
    """One change as a watch delivers it: replaced in place, deleted, or added at the end."""
    roll = rng.random()
    names = list(jobs)
    if roll < 0.2 and jobs:
        name = rng.choice(names)
        if rng.random() < 0.3:
            del jobs[name]
        else:
            jobs[name] = _random_dljob(rng, name)
    elif roll < 0.3:
        jobs[f"j{i}"] = _random_dljob(rng, f"j{i}")
    elif roll < 0.55 and pods:
        del pods[rng.choice(list(pods))]
    elif roll < 0.75 and pods:
        key = rng.choice(list(pods))
        new = copy.deepcopy(pods[key])  # same object, new version: a new dict in its place
        new["status"]["phase"] = rng.choice(["Running", "Running", "Failed"])
        pods[key] = new
    else:
        p = _random_pod(rng, i, names)
        pods[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = p


def _objs(nodes: list[dict[str, Any]], pods: dict[str, Any], jobs: dict[str, Any]) -> LiveObjects:
    return LiveObjects(nodes, list(pods.values()), list(jobs.values()))


@pytest.mark.parametrize("seed", range(8))
def test_each_update_equals_a_full_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    jobs = {f"j{k}": _random_dljob(rng, f"j{k}") for k in range(4)}
    pods: dict[str, dict[str, Any]] = {}
    for k in range(14):
        p = _random_pod(rng, k, list(jobs))
        pods[f"default/{p['metadata']['name']}"] = p
    for i in range(100, 160):
        _step(rng, pods, jobs, i)
        objs = _objs(nodes, pods, jobs)
        got = delta.update(objs, KEY)
        want = build_live_state(objs.nodes, objs.pods, objs.dljobs, predictor, keys=KEY)
        assert _snapshot(got) == _snapshot(want), f"step {i}"
    # Most steps are incremental; a GPU over-committed by the random records (often, on 32
    # GPUs) makes the following ones full builds. 40 seeds (2,400 steps) passed when written.
    assert delta.updates > 0


def test_a_change_to_a_node_or_the_key_ring_or_the_order_rebuilds_in_full() -> None:
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    pods = [pod(f"p{k}", assignment("n0", k, 20, 2000)) for k in range(3)]
    delta.update(LiveObjects(nodes, pods, []), KEY)
    delta.update(LiveObjects(nodes, pods[:2], []), KEY)
    assert (delta.full_builds, delta.updates) == (1, 1)
    moved = [nodes[1], nodes[0], *nodes[2:]]
    got = delta.update(LiveObjects(moved, pods[:2], []), KEY)
    assert delta.full_builds == 2
    got = delta.update(LiveObjects(moved, [pods[1], pods[0]], []), KEY)  # order changed
    assert delta.full_builds == 3
    got = delta.update(LiveObjects(moved, [pods[1], pods[0]], []), None)
    assert delta.full_builds == 4
    assert _snapshot(got) == _snapshot(build_live_state(moved, [pods[1], pods[0]], [], predictor))


def test_a_node_stored_anew_with_only_a_new_version_is_no_change() -> None:
    """The view replaces a node's dict when only its heartbeat moved (its projection drops
    the heartbeat, the version still moves): that must not rebuild the whole state — with
    thousands of nodes one always has — while a real change of a node must."""
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    pods = [pod(f"p{k}", assignment("n0", k, 20, 2000)) for k in range(3)]
    delta.update(LiveObjects(nodes, pods, []), KEY)
    renewed = copy.deepcopy(nodes)
    renewed[0]["metadata"]["resourceVersion"] = "999"
    delta.update(LiveObjects(renewed, pods[:2], []), KEY)
    assert (delta.full_builds, delta.updates) == (1, 1)
    cordoned = copy.deepcopy(renewed)
    cordoned[1]["spec"] = {"unschedulable": True}
    got = delta.update(LiveObjects(cordoned, pods[:2], []), KEY)
    assert delta.full_builds == 2
    assert "n1" in got.excluded_nodes
    assert _snapshot(got) == _snapshot(
        build_live_state(cordoned, pods[:2], [], predictor, keys=KEY)
    )


def test_an_overcommitted_gpu_is_rebuilt_in_full_when_the_winner_leaves() -> None:
    """Two records on one GPU that do not fit together: the listing's first wins. When it
    goes, the other must count (a delta of the one deleted pod alone would leave it out)."""
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    first = pod("first", assignment("n0", 0, core=80))
    second = pod("second", assignment("n0", 0, core=80))
    delta.update(LiveObjects(nodes, [first, second], []), KEY)
    got = delta.update(LiveObjects(nodes, [second], []), KEY)
    assert int(got.state.core_used[got.state.gpu_id("n0", 0)]) == 80
    assert list(got.state.jobs) == ["pod:default/second"]


class _ViewSource:
    """A watch-fed copy: the stored dicts themselves, and a generation that moves per change."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.gen = 0
        self.cached = True

    def list_objects(self) -> LiveObjects:
        return _objs(self.nodes, self.pods, self.jobs)

    def fresh_objects(self) -> LiveObjects:
        return self.list_objects()

    def generation(self) -> object:
        return self.gen if self.cached else None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def patch_pod_annotations(self, *a: Any, **k: Any) -> dict[str, Any]:
        raise NotImplementedError

    def bind_pod(self, *a: Any, **k: Any) -> None:
        raise NotImplementedError


def test_the_extender_answers_alike_from_the_kept_state_and_a_rebuild() -> None:
    rng = random.Random(7)
    predictor = load_default_predictor()
    kept_src, rebuilt_src = _ViewSource(_nodes()), _ViewSource(_nodes())
    rebuilt_src.cached = False
    rebuilt_src.nodes = kept_src.nodes
    kept = Extender(kept_src, predictor, key=KEY, cache_seconds=0)
    rebuilt = Extender(rebuilt_src, predictor, key=KEY, cache_seconds=0)
    names = [*NODES, "down", "missing"]
    for i in range(40):
        _step(rng, kept_src.pods, kept_src.jobs, i)
        kept_src.gen += 1
        rebuilt_src.pods, rebuilt_src.jobs = kept_src.pods, kept_src.jobs
        probe = sign_pod(plain_pod(f"probe{i}", rng.choice([10, 40, 90]), 8000))
        body = parse_extender_args({"Pod": probe, "NodeNames": names})
        assert kept.filter(body) == rebuilt.filter(body), f"step {i}"
        assert kept.prioritize(body) == rebuilt.prioritize(body), f"step {i}"
    assert kept._delta.updates > 20
