import statistics

from agent_helpers import inventory, pod

from horus.agent.backend import NodeView
from horus.agent.simulated import SimulatedBackend
from horus.predictor.interface import GraphProfile


def test_alone_util_follows_prediction_and_memory_is_labelled_simulated() -> None:
    b = SimulatedBackend(seed=1, noise=0.05, predictor=None)
    p = pod(util=40.0, mem_pred=1000.0)
    utils = []
    for _ in range(200):
        s = b.sample(NodeView("n1", inventory()), [p])
        utils.append(s.pods[p.uid].utilization or 0.0)
    assert s.backend == "simulated"
    assert abs(statistics.mean(utils) - 0.40) < 0.01
    assert 980 * 2**20 < s.pods[p.uid].memory_used_bytes < 1020 * 2**20
    assert s.gpus[1].utilization == 0.0 and s.gpus[1].memory_used_bytes == 0.0
    assert s.gpus[0].memory_total_bytes == 81920 * 2**20


def test_seeded_noise_is_reproducible() -> None:
    a = SimulatedBackend(seed=3).sample(NodeView("n1", inventory()), [pod()])
    b = SimulatedBackend(seed=3).sample(NodeView("n1", inventory()), [pod()])
    assert a == b


def test_sharing_slows_with_contention_fallback_and_total_capped() -> None:
    b = SimulatedBackend(seed=0, noise=0.0, predictor=None)
    p1, p2 = pod("a", util=80.0), pod("b", util=70.0)
    s = b.sample(NodeView("n1", inventory()), [p1, p2])
    u1, u2 = s.pods[p1.uid].utilization, s.pods[p2.uid].utilization
    assert u1 is not None and u2 is not None
    assert u1 < 0.8 and u2 < 0.7
    assert s.gpus[0].utilization <= 1.0


def test_pair_speed_from_predictor_when_profiles_known() -> None:
    class Fake:
        version = "fake"

        def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
            return 0.5

    b = SimulatedBackend(seed=0, noise=0.0, predictor=lambda: Fake())  # type: ignore[arg-type,return-value]
    p1, p2 = pod("a", util=40.0), pod("b", util=20.0)
    prof = GraphProfile("m", 1, {})
    s = b.sample(NodeView("n1", inventory()), [p1, p2], {p1.uid: prof, p2.uid: prof})
    assert s.pods[p1.uid].utilization == 0.2 and s.pods[p2.uid].utilization == 0.1


def test_mps_cap_and_memory_override() -> None:
    b = SimulatedBackend(seed=0, noise=0.0, cap_to_core_share=True)
    p = pod(core=25, util=60.0, sim_mem=3000.0)
    s = b.sample(NodeView("n1", inventory()), [p])
    assert s.pods[p.uid].utilization == 0.25
    assert s.pods[p.uid].memory_used_bytes == 3000 * 2**20
