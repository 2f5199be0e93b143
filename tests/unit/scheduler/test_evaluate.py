"""``Scheduler.evaluate``: per-node answers for the scheduler extender's filter and prioritize.

The promise: for each node, exactly what ``Scheduler.place`` answers when that node is the
only usable one — same filters, margins, scores, shares and refusal sentences — without
changing the state. Checked against ``place`` on a copy of the state whose other nodes'
GPUs are marked unhealthy, on random mixed clusters for every policy, and on hand-made
cases where the right answer is obvious.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import cluster, job, synthetic_predictor

from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common.constants import GPU_UNHEALTHY
from horus.predictor.interface import GraphProfile
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


@settings(max_examples=100, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sizes=st.lists(
        st.tuples(st.sampled_from(["A100", "V100"]), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=4,
    ),
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
    sizes=st.lists(
        st.tuples(st.sampled_from(["A100", "V100"]), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=6,
    ),
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
    sizes=st.lists(
        st.tuples(st.sampled_from(["A100", "V100"]), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=8,
    ),
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
