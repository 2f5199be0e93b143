"""``Scheduler.evaluate``: per-node answers for the scheduler extender's filter and prioritize.

The promise: for each node, exactly what ``Scheduler.place`` answers when that node is the
only usable one — same filters, margins, scores, shares and refusal sentences — without
changing the state. Checked against ``place`` on a copy of the state whose other nodes'
GPUs are marked unhealthy, on random mixed clusters for every policy, and on hand-made
cases where the right answer is obvious.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import TablePredictor, cluster, job, synthetic_predictor

from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common.constants import GPU_UNHEALTHY
from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.scheduler import (
    POLICY_NAMES,
    ClusterState,
    GpuShare,
    JobRequest,
    Placement,
    Refusal,
    RefusalCode,
    Scheduler,
)
from horus.scheduler.policies import Binpack, ScoreContext
from horus.scheduler.state import BoolArray, NodeSubset

pytestmark = pytest.mark.unit

PRED = synthetic_predictor(
    [(10, 2000), (35, 3000), (60, 9000), (90, 9000), (99, 20000), (50, 30000)], 0.2, 9
)
MODELS = PRED.usage


def _only_node(state: ClusterState, node: str) -> ClusterState:
    """A copy of ``state`` where every GPU off ``node`` is unhealthy."""
    alone = state.copy()
    for g in range(alone.gpu_count):
        name = alone.node_names[int(alone.node_of[g])]
        if name != node:
            alone.set_health(name, alone.gpu_index[g], False)
    return alone


def _measured(kind: str, other: str, _gpu: str) -> float:
    """``oracle``'s pair source: the table by model name (kinds are ``model@batch``)."""
    return PRED.pairs[(kind.split("@")[0], other.split("@")[0])]


def _same(a: Placement | Refusal, b: Placement | Refusal) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, Refusal):
        assert isinstance(b, Refusal)
        assert (a.job, a.code, a.reason) == (b.job, b.code, b.reason)
    else:
        assert isinstance(b, Placement)
        assert a == b


def _mixed_cluster(sizes: list[tuple[str, int]], sick: int) -> ClusterState:
    """Nodes of A100 (40 GiB) or V100 (16 GiB) GPUs; every ``sick``-th GPU unhealthy."""
    inv: dict[str, list[GpuDevice]] = {}
    k = 0
    for n, (model, gpus) in enumerate(sizes):
        name = f"node-{n}"
        mem = 40960 if model == "A100" else 16384
        inv[name] = []
        for i in range(gpus):
            k += 1
            health = GPU_UNHEALTHY if sick and k % sick == 0 else "Healthy"
            inv[name].append(GpuDevice(i, simulated_gpu_uuid(name, i), model, mem, health))
    return ClusterState.from_inventory(inv)


job_spec = st.tuples(
    st.sampled_from(sorted(MODELS)),
    st.sampled_from([1, 1, 1, 2, 3]),  # replicas
    st.sampled_from([1, 1, 1, 2, 4]),  # GPUs per replica
    st.one_of(st.none(), st.none(), st.integers(5, 100)),  # core %
    st.one_of(st.none(), st.none(), st.integers(1000, 50000)),  # memory MiB
    st.sampled_from([(), (), ("A100",), ("V100",)]),  # GPU models
)


Spec = tuple[str, int, int, int | None, int | None, tuple[str, ...]]


def _request(name: str, spec: Spec) -> JobRequest:
    model, reps, per, core, mem, gpu_models = spec
    return job(
        name,
        model,
        replicas=reps,
        gpus_per_replica=per,
        core_percent=core,
        memory_mib=mem,
        gpu_models=gpu_models,
    )


def node_sizes(most: int) -> st.SearchStrategy[list[tuple[str, int]]]:
    """1..``most`` nodes, each a GPU model and a GPU count."""
    return st.lists(
        st.tuples(st.sampled_from(["A100", "V100"]), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=most,
    )


@settings(max_examples=100, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sizes=node_sizes(4),
    sick=st.sampled_from([0, 0, 3, 5]),
    running=st.lists(job_spec, max_size=24),
    probes=st.lists(job_spec, min_size=1, max_size=4),
    measured=st.booleans(),
)
def test_evaluate_agrees_with_place_when_only_that_node_is_usable(
    policy: str,
    sizes: list[tuple[str, int]],
    sick: int,
    running: list[Spec],
    probes: list[Spec],
    measured: bool,
) -> None:
    state = _mixed_cluster(sizes, sick)
    sched = Scheduler(policy, PRED, pair_speed=_measured if policy == "oracle" else None)
    sched.schedule(state, [_request(f"run-{i}", s) for i, s in enumerate(running)])
    if measured:  # measured pairs change the margins of a decision
        sched.observe_pair("m1@32", "m2@32", "A100", 0.9)
        sched.observe_pair("m0@32", "m3@32", "V100", 0.4)
    nodes = [*state.node_names, "no-such-node"]
    for i, spec in enumerate(probes):
        probe = _request(f"probe-{i}", spec)
        version, njobs = state.version, state.njobs.copy()
        answers = sched.evaluate(state, probe, nodes)
        assert list(answers) == nodes
        assert state.version == version and (state.njobs == njobs).all()  # nothing applied
        for node in nodes:
            _same(answers[node], sched.place(_only_node(state, node), probe))
            placed = answers[node]
            if isinstance(placed, Placement):
                assert {s.node for s in placed.shares} == {node}


def test_each_node_answers_for_itself() -> None:
    state = cluster(3, 2)  # 24 GiB GPUs
    sched = Scheduler("horus", PRED)
    # node-0's memory full, node-1 half used, node-2 idle
    assert isinstance(
        sched.place(state, job("big-0", "m4", nodes=frozenset({"node-0"}))), Placement
    )
    assert isinstance(
        sched.place(state, job("big-1", "m4", nodes=frozenset({"node-0"}))), Placement
    )
    assert isinstance(sched.place(state, job("mid", "m2", nodes=frozenset({"node-1"}))), Placement)
    answers = sched.evaluate(state, job("new", "m2"), ["node-0", "node-1", "node-2"])
    refused = answers["node-0"]
    assert isinstance(refused, Refusal) and refused.code == RefusalCode.MEMORY
    assert refused.code.resolvable and "node-0/gpu-" in refused.reason
    for node in ("node-1", "node-2"):
        placed = answers[node]
        assert isinstance(placed, Placement) and placed.shares[0].node == node
    # horus prefers the idle GPU of node-1 (gain 1.0, fuller node among equals) to sharing
    p1 = answers["node-1"]
    assert isinstance(p1, Placement) and p1.predicted_gain == pytest.approx(1.0)


def test_a_gang_larger_than_the_node_never_fits_there() -> None:
    state = cluster(2, 2)
    sched = Scheduler("horus", PRED)
    answers = sched.evaluate(state, job("gang", "m0", gpus_per_replica=4), state.node_names)
    for r in answers.values():
        assert isinstance(r, Refusal) and r.code == RefusalCode.IMPOSSIBLE
        assert not r.code.resolvable


def test_unknown_node_is_a_node_without_gpus() -> None:
    state = cluster(1, 1)
    r = Scheduler("binpack", PRED).evaluate(state, job("a", "m0"), ["elsewhere"])["elsewhere"]
    assert isinstance(r, Refusal) and r.code == RefusalCode.IMPOSSIBLE
    assert "0 healthy GPUs" in r.reason


def test_refusal_codes_know_their_condition_reason_and_resolvability() -> None:
    assert RefusalCode("impossible") is RefusalCode.IMPOSSIBLE
    assert RefusalCode.IMPOSSIBLE == "impossible" and f"{RefusalCode.GANG}" == "gang"
    assert RefusalCode.NODES.condition_reason == "NoMatchingNode"
    assert {c for c in RefusalCode if not c.resolvable} == {
        RefusalCode.IMPOSSIBLE,
        RefusalCode.NODES,
    }
    assert all(c.condition_reason[0].isupper() for c in RefusalCode)
    assert Refusal("j", "why", "memory").code is RefusalCode.MEMORY  # type: ignore[arg-type]
    from horus.common.errors import ValidationError

    with pytest.raises(ValidationError, match="unknown code 'nope'"):
        Refusal("j", "why", "nope")  # type: ignore[arg-type]


def test_a_job_refused_on_its_nodes_does_not_refuse_a_twin_allowed_elsewhere() -> None:
    """The queue pass remembers a failure for jobs of the same shape; which nodes a job may
    use is part of its shape, or a job pinned to a full node would turn away a twin that
    fits on another."""
    state = cluster(2, 1)  # 24 GiB GPUs
    sched = Scheduler("horus", PRED)
    assert isinstance(sched.place(state, job("fill", "m4", nodes=frozenset({"node-0"}))), Placement)
    pinned = job("pinned", "m4", nodes=frozenset({"node-0"}))
    free = job("free", "m4")
    result = sched.schedule(state, [pinned, free], explain=False)
    assert [p.job for p in result.placed] == ["free"]
    assert {s.node for s in result.placed[0].shares} == {"node-1"}


@settings(max_examples=100, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sizes=node_sizes(6),
    sick=st.sampled_from([0, 0, 3, 5]),
    running=st.lists(job_spec, max_size=32),
    probes=st.lists(job_spec, min_size=1, max_size=4),
)
def test_the_vectorised_answer_is_the_per_node_replay(
    policy: str,
    sizes: list[tuple[str, int]],
    sick: int,
    running: list[Spec],
    probes: list[Spec],
) -> None:
    """``evaluate`` (one vectorised step for one-GPU jobs, issue 27) answers exactly what the
    full per-node replay of the filters answers, node by node, in the same order."""
    state = _mixed_cluster(sizes, sick)
    sched = Scheduler(policy, PRED, pair_speed=_measured if policy == "oracle" else None)
    sched.schedule(state, [_request(f"run-{i}", s) for i, s in enumerate(running)])
    nodes = ["no-such-node", *reversed(state.node_names)]
    for i, spec in enumerate(probes):
        probe = _request(f"probe-{i}", spec)
        fast = sched.evaluate(state, probe, nodes)
        slow = sched.evaluate_each(state, probe, nodes)
        assert list(fast) == list(slow) == nodes
        for node in nodes:
            _same(fast[node], slow[node])


one_gpu_spec = st.tuples(
    st.sampled_from(sorted(MODELS)),
    st.just(1),
    st.just(1),
    st.one_of(st.none(), st.integers(5, 100)),  # core %
    st.one_of(st.none(), st.integers(200, 45000)),  # memory MiB
    st.sampled_from([(), (), ("A100",), ("V100",)]),  # GPU models
)


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sizes=node_sizes(8),
    sick=st.sampled_from([0, 0, 3, 5]),
    running=st.lists(one_gpu_spec, max_size=60),
    probes=st.lists(one_gpu_spec, min_size=1, max_size=4),
    pinned=st.lists(st.integers(0, 7), max_size=3),
)
def test_one_gpu_refusals_on_crowded_nodes_are_the_replays(
    policy: str,
    sizes: list[tuple[str, int]],
    sick: int,
    running: list[Spec],
    probes: list[Spec],
    pinned: list[int],
) -> None:
    """The refusals of one-GPU jobs — every plain pod the extender is asked about — come from
    one vectorised step over the refused nodes (``explain_nodes``, issue 27): on crowded
    clusters (up to 60 one-GPU jobs, so nodes run out of memory, core, slots or a sharing
    rule turns the job down) and for jobs pinned to some nodes, each node's sentence and code
    are the full per-node replay's."""
    state = _mixed_cluster(sizes, sick)
    sched = Scheduler(policy, PRED, pair_speed=_measured if policy == "oracle" else None)
    sched.schedule(state, [_request(f"run-{i}", s) for i, s in enumerate(running)])
    allowed = frozenset(f"node-{i}" for i in pinned) or None
    nodes = [*state.node_names, "no-such-node"]
    for i, spec in enumerate(probes):
        probe = _request(f"probe-{i}", spec)
        if allowed is not None and i % 2:
            probe = JobRequest(**{**probe.__dict__, "nodes": allowed})
        fast = sched.evaluate(state, probe, nodes)
        slow = sched.evaluate_each(state, probe, nodes)
        for node in nodes:
            _same(fast[node], slow[node])


def test_a_gpu_inside_the_headroom_is_explained_as_the_replay_does() -> None:
    """``horus-original`` keeps 500 MiB free on a GPU: a node whose GPUs have less than that
    left has negative free memory, and the replay's best candidate is then a GPU of another
    node (its sentence names it). The vectorised step leaves such a node to the replay."""
    state = cluster(3, 2, memory_mib=24576)
    sched = Scheduler("horus-original", PRED)
    for g in range(2):  # node-0's GPUs: 24,276 of 24,576 MiB used (300 MiB < the headroom),
        # as a pod the device plugin placed counts in the live state
        share = GpuShare("node-0", g, simulated_gpu_uuid("node-0", g), 10, 24276)
        state.add_job(job(f"fill-{g}", "m0"), [share], PRED.predict(GraphProfile("m0", 32), ""))
    probe = job("probe", "m0", memory_mib=20000, core_percent=10)
    fast = sched.evaluate(state, probe, state.node_names)
    slow = sched.evaluate_each(state, probe, state.node_names)
    refused = fast["node-0"]
    assert isinstance(refused, Refusal) and refused.code == RefusalCode.MEMORY
    assert "node-0" not in refused.reason  # the replay names a GPU of another node
    for node in state.node_names:
        _same(fast[node], slow[node])


def _scenarios() -> ClusterState:
    """One node per reason a one-GPU job is refused, beside an idle node: memory, slots,
    core, the utilisation cap, a sharing rule, unhealthy GPUs, GPUs too small."""
    inv: dict[str, list[GpuDevice]] = {}
    for n, mem in enumerate([24576] * 7 + [1024]):
        name = f"node-{n}"
        inv[name] = [GpuDevice(i, simulated_gpu_uuid(name, i), "A100", mem) for i in range(2)]
    state = ClusterState.from_inventory(inv)

    def put(node: str, name: str, model: str, core: int, mib: int) -> None:
        for g in range(2):
            share = GpuShare(node, g, simulated_gpu_uuid(node, g), core, mib)
            pred = PRED.predict(GraphProfile(model, 32), "A100")
            state.add_job(job(f"{name}-{g}", model), [share], pred)

    put("node-1", "mem", "m1", 10, 24000)  # memory
    for k in range(3):
        put("node-2", f"slot{k}", "m1", 5, 100)  # job slots (3 per GPU)
    put("node-3", "core", "m1", 100, 1000)  # core
    put("node-4", "hot", "m4", 10, 1000)  # summed utilisation 99 + 99 + the job's > 200
    put("node-4", "hot2", "m4", 10, 1000)
    put("node-5", "slow", "m0", 10, 1000)  # m0 next to m0 runs at 0.2×: sharing would not pay
    for g in range(2):
        state.set_health("node-6", g, False)  # no healthy GPU
    return state  # node-7: GPUs of 1 GiB, too small for the job


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_refusal_of_a_one_gpu_job_is_the_replays(policy: str) -> None:
    """Each refusal branch of the vectorised step, on its own node, against the replay."""
    state = _scenarios()
    sched = Scheduler(policy, PRED, pair_speed=_measured if policy == "oracle" else None)
    probe = job("probe", "m0", memory_mib=5000)
    fast = sched.evaluate(state, probe, [*state.node_names, "no-such-node"])
    slow = sched.evaluate_each(state, probe, [*state.node_names, "no-such-node"])
    for node in fast:
        _same(fast[node], slow[node])
    codes = {n: r.code for n, r in fast.items() if isinstance(r, Refusal)}
    assert isinstance(fast["node-0"], Placement)
    assert codes["node-6"] == codes["node-7"] == RefusalCode.IMPOSSIBLE
    if policy == "exclusive":  # one job per GPU: every node with a job is busy
        assert {codes[f"node-{n}"] for n in range(1, 6)} == {RefusalCode.BUSY}
        return
    assert codes["node-1"] == RefusalCode.MEMORY
    assert codes["node-2"] == RefusalCode.SLOTS
    assert codes["node-3"] == RefusalCode.CORE
    if policy in ("horus", "oracle"):
        assert "summed-utilisation cap" in fast["node-4"].reason  # type: ignore[union-attr]
    if policy == "horus":
        assert codes["node-5"] == RefusalCode.INTERFERENCE


# --- the candidate nodes' GPUs alone (NodeSubset): kube-scheduler sends 500 of 5,000 ---------
class _ByModel(TablePredictor):
    """``PRED`` with needs that differ by GPU model (V100: 30 % more utilisation, 20 % less
    memory), so the job's largest need over the cluster differs from the candidates' where
    only some models are among them — what a refusal quotes."""

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        p = super().predict(profile, gpu)
        if gpu != "V100":
            return p
        return ResourcePrediction(
            p.util_mean * 1.3, p.util_upper * 1.3, p.memory_mib_mean * 0.8, p.memory_mib_upper * 0.8
        )


BY_MODEL = _ByModel(PRED.usage, PRED.pairs)


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sizes=node_sizes(8),
    sick=st.sampled_from([0, 0, 3, 5]),
    running=st.lists(st.one_of(one_gpu_spec, job_spec), max_size=60),
    probes=st.lists(st.one_of(one_gpu_spec, one_gpu_spec, job_spec), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 8), max_size=4),
    measured=st.booleans(),
    by_model=st.booleans(),
)
def test_candidate_nodes_alone_answer_as_every_gpu_does(
    policy: str,
    sizes: list[tuple[str, int]],
    sick: int,
    running: list[Spec],
    probes: list[Spec],
    picks: list[int],
    measured: bool,
    by_model: bool,
) -> None:
    """``evaluate`` judges only the named nodes' GPUs (a ``NodeSubset``, issue 27): for any
    subset of the nodes, in any order, with unknown names and repeats among them, each
    node's answer is the full per-node replay's on the whole state — also where the answer
    quotes something of the whole cluster (its largest GPU, the job's largest need on any
    GPU model: the predictor here makes needs differ by model) and where a sentence comes
    from another node's GPU (the replay on the whole state answers those)."""
    state = _mixed_cluster(sizes, sick)
    pred = BY_MODEL if by_model else PRED
    sched = Scheduler(policy, pred, pair_speed=_measured if policy == "oracle" else None)
    sched.schedule(state, [_request(f"run-{i}", s) for i, s in enumerate(running)])
    if measured:
        sched.observe_pair("m1@32", "m2@32", "A100", 0.9)
        sched.observe_pair("m0@32", "m3@32", "V100", 0.4)
    names = [state.node_names[p] if p < len(state.node_names) else "no-such-node" for p in picks]
    for i, spec in enumerate(probes):
        probe = _request(f"probe-{i}", spec)
        version = state.version
        fast = sched.evaluate(state, probe, names)
        slow = sched.evaluate_each(state, probe, names)
        assert state.version == version
        assert list(fast) == list(slow) == list(dict.fromkeys(names))
        for node in fast:
            _same(fast[node], slow[node])


def _two_models() -> ClusterState:
    """node-0, node-1: two V100s (16 GiB) each; node-2: two A100s (40 GiB)."""
    return _mixed_cluster([("V100", 2), ("V100", 2), ("A100", 2)], 0)


def test_a_refusal_among_candidates_quotes_the_whole_clusters_largest_gpu() -> None:
    """A job too big for the V100 candidates is told the cluster's largest GPU (an A100 not
    among them), as when every GPU is judged."""
    state = _two_models()
    sched = Scheduler("horus", PRED)
    probe = job("big", "m5", memory_mib=30000)  # fits only an A100
    answers = sched.evaluate(state, probe, ["node-0"])
    refused = answers["node-0"]
    assert isinstance(refused, Refusal) and refused.code == RefusalCode.IMPOSSIBLE
    assert "the largest GPU has 40.0 GiB" in refused.reason
    _same(refused, sched.evaluate_each(state, probe, ["node-0"])["node-0"])


@pytest.mark.parametrize("policy", ["binpack", "horus"])
def test_a_refusal_among_candidates_quotes_the_jobs_largest_need_on_any_model(
    policy: str,
) -> None:
    """The slots sentence quotes the job's largest memory need over every GPU of the
    cluster: with needs that differ by model and only V100 candidates, that is its A100
    need, which no candidate GPU has."""
    state = _two_models()
    sched = Scheduler(policy, BY_MODEL)
    for g in range(2):
        for k in range(sched.policy.max_jobs_per_gpu(sched.settings)):
            share = GpuShare("node-0", g, simulated_gpu_uuid("node-0", g), 5, 100)
            pred = BY_MODEL.predict(GraphProfile("m0", 32), "V100")
            state.add_job(job(f"slot-{g}-{k}", "m0"), [share], pred)
    probe = job("probe", "m2")
    fast = sched.evaluate(state, probe, ["node-0"])["node-0"]
    assert isinstance(fast, Refusal) and fast.code == RefusalCode.SLOTS
    need_a100 = BY_MODEL.predict(GraphProfile("m2", 32), "A100").memory_mib_upper
    assert f"every GPU with {need_a100 / 1024:.1f} GiB free" in fast.reason
    _same(fast, sched.evaluate_each(state, probe, ["node-0"])["node-0"])


def test_a_refusal_among_candidates_quotes_the_jobs_highest_utilisation_on_any_model() -> None:
    """The utilisation-cap sentence quotes the job's highest predicted utilisation over every
    GPU of the cluster: with only the A100 node a candidate, that is its V100 figure."""
    state = _two_models()
    sched = Scheduler("horus", BY_MODEL)
    for g in range(2):
        for k in range(2):  # summed utilisation 99 + 99: no room under the cap for more
            share = GpuShare("node-2", g, simulated_gpu_uuid("node-2", g), 10, 1000)
            pred = BY_MODEL.predict(GraphProfile("m4", 32), "A100")
            state.add_job(job(f"hot-{g}-{k}", "m4"), [share], pred)
    probe = job("probe", "m0")
    fast = sched.evaluate(state, probe, ["node-2"])["node-2"]
    assert isinstance(fast, Refusal) and "summed-utilisation cap" in fast.reason
    on_v100 = BY_MODEL.predict(GraphProfile("m0", 32), "V100").util_mean
    assert f"(job predicted at {on_v100:.0f}%)" in fast.reason
    _same(fast, sched.evaluate_each(state, probe, ["node-2"])["node-2"])


def test_a_sentence_from_another_nodes_gpu_among_candidates_is_the_whole_replays() -> None:
    """Where a node's GPUs are inside ``horus-original``'s headroom the replay's sentence
    names a GPU of another node of the whole state; with only some nodes as candidates it
    is still that GPU (the whole state's replay answers it), not one of the candidates'."""
    state = cluster(3, 2, memory_mib=24576)
    sched = Scheduler("horus-original", PRED)
    for g in range(2):
        share = GpuShare("node-0", g, simulated_gpu_uuid("node-0", g), 10, 24276)
        state.add_job(job(f"fill-{g}", "m0"), [share], PRED.predict(GraphProfile("m0", 32), ""))
    probe = job("probe", "m0", memory_mib=20000, core_percent=10)
    for names in (["node-0"], ["node-2", "node-0"]):
        fast = sched.evaluate(state, probe, names)
        slow = sched.evaluate_each(state, probe, names)
        assert "node-1/gpu-0" in fast["node-0"].reason  # type: ignore[union-attr]
        for node in names:
            _same(fast[node], slow[node])


class _BelowMedian(Binpack):
    """A policy with a cluster-wide term: only GPUs running no more jobs than the median GPU
    of the whole state pass its filter."""

    name = "below-median"
    per_gpu = False

    def refine(self, ctx: ScoreContext, mask: BoolArray) -> BoolArray:
        return mask & (ctx.state.njobs <= np.median(ctx.state.njobs))


def _crowded_node_0() -> ClusterState:
    """Three nodes of two GPUs; node-0's GPUs run two jobs each, the others none (the median
    GPU of the cluster runs none; of node-0 alone, two)."""
    state = cluster(3, 2)
    for g in range(2):
        for k in range(2):
            share = GpuShare("node-0", g, simulated_gpu_uuid("node-0", g), 10, 1000)
            pred = PRED.predict(GraphProfile("m0", 32), "")
            state.add_job(job(f"fill-{g}-{k}", "m0"), [share], pred)
    return state


def test_a_policy_with_a_cluster_wide_term_is_judged_on_every_gpu() -> None:
    """A policy that says its filter reads the whole state (``per_gpu = False``) is scored
    on every GPU, whatever the candidates: node-0 is refused as when all nodes are asked."""
    state = _crowded_node_0()
    sched = Scheduler(_BelowMedian(), PRED)
    probe = job("probe", "m0")
    alone = sched.evaluate(state, probe, ["node-0"])["node-0"]
    assert isinstance(alone, Refusal)
    _same(alone, sched.evaluate_each(state, probe, ["node-0"])["node-0"])
    _same(alone, sched.evaluate(state, probe, state.node_names)["node-0"])


def test_the_differential_sees_a_cluster_wide_term_judged_on_the_candidates_alone() -> None:
    """The same policy claiming ``per_gpu`` is judged on node-0's GPUs alone (median two
    there) and placed — unlike the replay on every GPU. What the property test above would
    catch if a policy's score or filter read the whole state."""
    state = _crowded_node_0()
    claims = _BelowMedian()
    claims.per_gpu = True
    sched = Scheduler(claims, PRED)
    probe = job("probe", "m0")
    assert isinstance(sched.evaluate(state, probe, ["node-0"])["node-0"], Placement)
    assert isinstance(sched.evaluate_each(state, probe, ["node-0"])["node-0"], Refusal)


def test_a_node_subset_is_the_whole_states_gpus_read_only() -> None:
    """``NodeSubset``: the named nodes' GPUs in the whole state's order with their figures,
    the whole cluster's largest GPU, GPU numbers mapped both ways; every change refused."""
    state = _two_models()
    sched = Scheduler("horus", PRED)
    sched.place(state, job("a", "m1", nodes=frozenset({"node-2"})))
    sub = NodeSubset(state, [2, 0, 2])  # taken in order, once each
    assert sub.node_names == ["node-0", "node-2"] and sub.gpu_count == 4
    assert sub.gpus.tolist() == [0, 1, 4, 5]
    assert sub.node_of.tolist() == [0, 0, 1, 1]
    assert (sub.mem_used == state.mem_used[[0, 1, 4, 5]]).all()
    assert (sub.sig_id == state.sig_id[[0, 1, 4, 5]]).all()
    assert sub.largest_gpu_mib == state.largest_gpu_mib == 40960
    assert NodeSubset(state, [0]).largest_gpu_mib == 40960  # not its own 16 GiB
    assert sub.label(2) == "node-2/gpu-0" and sub.gpu_id("node-2", 1) == 3
    assert sub.node_index("node-2") == 1 and sub.node_index("node-1") == -1
    with pytest.raises(ValidationError):
        sub.gpu_id("node-1", 0)
    share = GpuShare("node-0", 0, simulated_gpu_uuid("node-0", 0), 10, 100)
    pred = PRED.predict(GraphProfile("m0", 32), "")
    for change in (
        lambda: sub.add_job(job("b", "m0"), [share], pred),
        lambda: sub.release("a"),
        lambda: sub.set_health("node-0", 0, False),
        lambda: sub.fork(),
        lambda: sub.copy(),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
