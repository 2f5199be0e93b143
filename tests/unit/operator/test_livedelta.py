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
from horus.operator.extender.demand import cached_profile
from horus.operator.livedelta import FULL_REFUSED, Change, LiveDelta
from horus.operator.livestate import LiveObjects, build_live_state
from horus.predictor import load_default_predictor
from horus.predictor.schema import graph_profile
from live_snapshot import snapshot as _snapshot
from signing_keys import KEY, sign_pod

NODES = ["n0", "n1", "n2", "n3"]
GPUS = 8


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


def _start(
    rng: random.Random,
) -> tuple[Any, LiveDelta, list[dict[str, Any]], dict[str, Any], dict[str, dict[str, Any]]]:
    """A predictor, an empty LiveDelta, the nodes, 4 random DLJobs and 14 random pods."""
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    jobs = {f"j{k}": _random_dljob(rng, f"j{k}") for k in range(4)}
    pods: dict[str, dict[str, Any]] = {}
    for k in range(14):
        p = _random_pod(rng, k, list(jobs))
        pods[f"default/{p['metadata']['name']}"] = p
    return predictor, delta, _nodes(), jobs, pods


def _same_answers(
    kept: Extender, rebuilt: Extender, rng: random.Random, i: int, names: list[str]
) -> None:
    """A random pod's filter and prioritize answers are the same from both extenders."""
    probe = sign_pod(plain_pod(f"probe{i}", rng.choice([10, 40, 90]), 8000))
    body = parse_extender_args({"Pod": probe, "NodeNames": names})
    assert kept.filter(body) == rebuilt.filter(body), f"step {i}"
    assert kept.prioritize(body) == rebuilt.prioritize(body), f"step {i}"


@pytest.mark.parametrize("seed", range(8))
def test_each_update_equals_a_full_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    predictor, delta, nodes, jobs, pods = _start(rng)
    for i in range(100, 160):
        _step(rng, pods, jobs, i)
        objs = _objs(nodes, pods, jobs)
        got = delta.update(objs, KEY)
        want = build_live_state(objs.nodes, objs.pods, objs.dljobs, predictor, keys=KEY)
        assert _snapshot(got) == _snapshot(want), f"step {i}"
    # Most steps are incremental; a GPU over-committed by the random records (often, on 32
    # GPUs) makes the following ones full builds. 40 seeds (2,400 steps) passed when written.
    assert delta.updates > 0


def _profiles() -> list[Any]:
    return [
        graph_profile(cached_profile(json.dumps(profile_doc(n))))
        for n in ("resnet50-bs64", "mobilenetv2-cifar-bs128", "lstm-lm-bs20")
    ]


@pytest.mark.parametrize("seed", range(8))
def test_a_changed_profile_or_trust_alone_counts_the_job_again(seed: int) -> None:
    """The operator's inputs beside the objects: the profiles its admission resolved and the
    records it distrusts (a rollback). A step that changes only one of them — no object —
    must give what a full build with the new inputs gives."""
    rng = random.Random(seed)
    predictor, delta, nodes, jobs, pods = _start(rng)
    choices = _profiles()
    profiles: dict[str, Any] = {}
    distrusted: set[str] = set()
    alone = 0
    for i in range(100, 160):
        if rng.random() < 0.5 and jobs:
            jname = f"default/{rng.choice(list(jobs))}"
            if rng.random() < 0.5:
                distrusted ^= {jname}
            elif jname in profiles and rng.random() < 0.3:
                del profiles[jname]
            else:
                profiles[jname] = rng.choice(choices)
            alone += 1
        else:
            _step(rng, pods, jobs, i)
        objs = _objs(nodes, pods, jobs)
        got = delta.update(objs, KEY, dict(profiles), set(distrusted))
        want = build_live_state(
            objs.nodes, objs.pods, objs.dljobs, predictor, profiles, KEY, distrusted
        )
        assert _snapshot(got) == _snapshot(want), f"step {i}"
    assert alone > 10 and delta.updates > 0


def _three_on_n0() -> tuple[Any, LiveDelta, list[dict[str, Any]], list[dict[str, Any]]]:
    """A predictor, a LiveDelta that built the nodes and three pods on n0, those nodes, pods."""
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    pods = [pod(f"p{k}", assignment("n0", k, 20, 2000)) for k in range(3)]
    delta.update(LiveObjects(nodes, pods, []), KEY)
    return predictor, delta, nodes, pods


def test_a_change_to_a_node_or_the_key_ring_or_the_order_rebuilds_in_full() -> None:
    predictor, delta, nodes, pods = _three_on_n0()
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
    predictor, delta, nodes, pods = _three_on_n0()
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


def test_a_node_change_the_state_does_not_read_keeps_it() -> None:
    """A fresh kwok cluster's nodes gain ``beta.kubernetes.io/*`` labels one by one for
    minutes, and real nodes get labels and annotations from other controllers: none of that
    is read by the live state, so it must not rebuild it. A change of what it reads — the
    memory unit the extender's per-node units come from — must."""
    predictor, delta, nodes, pods = _three_on_n0()
    labelled = copy.deepcopy(nodes)
    for n in labelled:
        n["metadata"].setdefault("labels", {})["beta.kubernetes.io/arch"] = "amd64"
        n["metadata"].setdefault("annotations", {})["example.com/owner"] = "team-a"
    got = delta.update(LiveObjects(labelled, pods, []), KEY)
    assert (delta.full_builds, delta.updates) == (1, 1)
    assert _snapshot(got) == _snapshot(build_live_state(labelled, pods, [], predictor, keys=KEY))
    unit = copy.deepcopy(labelled)
    unit[0]["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_UNIT] = "256"
    delta.update(LiveObjects(unit, pods, []), KEY)
    assert delta.full_builds == 2 and delta.full_reason == "nodes"


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


def test_an_overcommitted_gpu_with_nothing_changed_keeps_the_full_build() -> None:
    """While a record is refused for lack of room, any change builds in full (the listing's
    order decides which record wins), but an update with nothing changed hands back the full
    build of that very listing: a still cluster with one over-committed GPU must not rebuild
    everything on every extender request and operator pass."""
    predictor = load_default_predictor()
    delta = LiveDelta(predictor, lambda p: None)
    nodes = _nodes()
    first = pod("first", assignment("n0", 0, core=80))
    second = pod("second", assignment("n0", 0, core=80))
    other = pod("other", assignment("n1", 0, core=20))
    built = delta.update(LiveObjects(nodes, [first, second, other], []), KEY)
    assert any(": share not counted: " in p for p in built.problems)
    again = delta.update(LiveObjects(nodes, [first, second, other], []), KEY)
    assert again is built and (delta.full_builds, delta.updates) == (1, 1)
    assert _snapshot(again) == _snapshot(
        build_live_state(nodes, [first, second, other], [], predictor, keys=KEY)
    )
    got = delta.update(LiveObjects(nodes, [first, second], []), KEY)  # a change: in full
    assert delta.full_builds == 2 and delta.full_reason == FULL_REFUSED
    assert _snapshot(got) == _snapshot(
        build_live_state(nodes, [first, second], [], predictor, keys=KEY)
    )


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
        _same_answers(kept, rebuilt, rng, i, names)
    assert kept._delta.updates > 20


def _events(kind: str, before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """The watch's events for one step of :func:`_step` (keys as the view's informer
    writes them): deleted, replaced in place, added at the end."""
    out = [Change(kind, k, False, True) for k in before if k not in after]
    out += [
        Change(kind, k, False, False) for k in after if k in before and after[k] is not before[k]
    ]
    out += [Change(kind, k, True, False) for k in after if k not in before]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_updates_from_the_watchs_events_equal_a_full_rebuild(seed: int) -> None:
    """:meth:`LiveDelta.update_changes` — the changed keys from the watch, no diff of the
    listing — gives the full build after every step, and reads the listing only where the
    events cannot be followed (a refusal for lack of room)."""
    rng = random.Random(100 + seed)
    predictor, delta, nodes, jobs, pods = _start(rng)
    listed = 0

    def listing() -> LiveObjects:
        nonlocal listed
        listed += 1
        return _objs(nodes, pods, jobs)

    def lookup(kind: str, key: str) -> dict[str, Any] | None:
        return (pods if kind == "pods" else jobs if kind == "dljobs" else {}).get(key)

    delta.update_changes(None, lookup, listing, KEY)
    dl_keys = {f"default/{k}": k for k in jobs}
    for i in range(100, 160):
        before_pods, before_jobs = dict(pods), {f"default/{k}": v for k, v in jobs.items()}
        _step(rng, pods, jobs, i)
        after_jobs = {f"default/{k}": v for k, v in jobs.items()}
        dl_keys.update({f"default/{k}": k for k in jobs})
        changes = _events("dljobs", before_jobs, after_jobs) + _events("pods", before_pods, pods)
        got = delta.update_changes(
            changes,
            lambda kind, key: (
                jobs.get(dl_keys.get(key, "")) if kind == "dljobs" else lookup(kind, key)
            ),
            listing,
            KEY,
        )
        objs = _objs(nodes, pods, jobs)
        want = build_live_state(objs.nodes, objs.pods, objs.dljobs, predictor, keys=KEY)
        assert _snapshot(got) == _snapshot(want), f"step {i}"
    assert delta.updates > 0
    assert listed < delta.full_builds + 60 - delta.updates // 2  # most steps read no listing


def _three_pods() -> tuple[Any, LiveDelta, list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """A fresh delta and three pods on node n0's GPUs 0-2 (20 % core, 2,000 MiB each)."""
    predictor = load_default_predictor()
    nodes = _nodes()
    pods = {f"default/p{k}": pod(f"p{k}", assignment("n0", k, 20, 2000)) for k in range(3)}
    return predictor, LiveDelta(predictor, lambda p: None), nodes, pods


def test_a_change_the_events_leave_out_is_not_seen() -> None:
    """The events are all the update reads: a replaced pod they do not name keeps its old
    share (so the view's log must name every change — test_view_change_log), while the same
    change named is counted."""
    predictor, delta, nodes, pods = _three_pods()

    def listing() -> LiveObjects:
        return _objs(nodes, pods, {})

    delta.update_changes(None, lambda k, key: pods.get(key), listing, KEY)
    pods["default/p1"] = pod("p1", assignment("n0", 1, 60, 2000))
    missed = delta.update_changes([], lambda k, key: pods.get(key), listing, KEY)
    assert int(missed.state.core_used[missed.state.gpu_id("n0", 1)]) == 20
    seen = delta.update_changes(
        [Change("pods", "default/p1", False, False)], lambda k, key: pods.get(key), listing, KEY
    )
    assert int(seen.state.core_used[seen.state.gpu_id("n0", 1)]) == 60
    want = build_live_state(nodes, list(pods.values()), [], predictor, keys=KEY)
    assert _snapshot(seen) == _snapshot(want)
    assert (delta.full_builds, delta.updates) == (1, 2)


def test_a_pod_that_counts_under_no_job_changes_nothing() -> None:
    """A pending pod (no assignment) created, changed and deleted, and a finished one: the
    full build skips such pods, so the update hands back the state it holds — not a fork
    with nothing released — and that state is still the full build's. A pod that does
    count, changed next, is counted again in a new state."""
    predictor, delta, nodes, pods = _three_pods()

    def listing() -> LiveObjects:
        return _objs(nodes, pods, {})

    def lookup(kind: str, key: str) -> dict[str, Any] | None:
        return pods.get(key)

    held = delta.update_changes(None, lookup, listing, KEY)
    steps: list[tuple[Change, dict[str, Any] | None]] = [
        (Change("pods", "default/wait", True, False), pod("wait", None)),
        (Change("pods", "default/wait", False, False), pod("wait", None, phase="Pending")),
        (Change("pods", "default/done", True, False), pod("done", None, phase="Succeeded")),
        (Change("pods", "default/wait", False, True), None),
    ]
    for change, obj in steps:
        if obj is None:
            del pods[change.key]
        else:
            pods[change.key] = obj
        got = delta.update_changes([change], lookup, listing, KEY)
        assert got is held and delta.added == ()
        want = build_live_state(nodes, list(pods.values()), [], predictor, keys=KEY)
        assert _snapshot(got) == _snapshot(want)
    pods["default/p1"] = pod("p1", assignment("n0", 1, 60, 2000))
    moved = delta.update_changes([Change("pods", "default/p1", False, False)], lookup, listing, KEY)
    assert moved is not held and delta.added == ("pod:default/p1",)
    assert int(moved.state.core_used[moved.state.gpu_id("n0", 1)]) == 60
    assert int(held.state.core_used[held.state.gpu_id("n0", 1)]) == 20  # left as it was
    want = build_live_state(nodes, list(pods.values()), [], predictor, keys=KEY)
    assert _snapshot(moved) == _snapshot(want)
    assert (delta.full_builds, delta.updates) == (1, 5)


class _FedSource(_ViewSource):
    """:class:`_ViewSource` with the view's change feed (``changes_since``, ``lookup``)."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(nodes)
        self.log: list[Change] = []

    def step(self, rng: random.Random, i: int) -> None:
        before_pods, before_jobs = dict(self.pods), dict(self.jobs)
        _step(rng, self.pods, self.jobs, i)
        self.log += _events("dljobs", _keyed(before_jobs), _keyed(self.jobs))
        self.log += _events("pods", before_pods, self.pods)
        self.gen += 1

    def changes_since(self, mark: object) -> tuple[object, list[Change] | None]:
        return len(self.log), (self.log[mark:] if isinstance(mark, int) else None)

    def lookup(self, kind: str, key: str) -> dict[str, Any] | None:
        if kind == "dljobs":
            return _keyed(self.jobs).get(key)
        return self.pods.get(key) if kind == "pods" else None


def _keyed(jobs: dict[str, Any]) -> dict[str, Any]:
    return {f"{v['metadata'].get('namespace', 'default')}/{k}": v for k, v in jobs.items()}


def test_the_extender_fed_the_watchs_events_answers_as_a_rebuild() -> None:
    rng = random.Random(11)
    predictor = load_default_predictor()
    fed = _FedSource(_nodes())
    rebuilt_src = _ViewSource(fed.nodes)
    rebuilt_src.cached = False
    kept = Extender(fed, predictor, key=KEY, cache_seconds=0)
    rebuilt = Extender(rebuilt_src, predictor, key=KEY, cache_seconds=0)
    names = [*NODES, "down", "missing"]
    listed = 0
    lister = fed.list_objects

    def counted() -> LiveObjects:
        nonlocal listed
        listed += 1
        return lister()

    fed.list_objects = counted  # type: ignore[method-assign]
    for i in range(40):
        fed.step(rng, i)
        rebuilt_src.pods, rebuilt_src.jobs = fed.pods, fed.jobs
        _same_answers(kept, rebuilt, rng, i, names)
    assert kept._delta.updates > 20
    # the events, not the listing, were read: only each full build (its first, and after
    # an over-committed GPU) listed
    assert listed == kept._delta.full_builds
