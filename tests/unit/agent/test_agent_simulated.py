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


class _Optimistic:
    """A pair model that promises more than a GPU's time allows (0.9 each for 88 % + 88 %)."""

    version = "optimistic"

    def __init__(self, speed: float) -> None:
        self.speed = speed

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        return self.speed


def _pair(speed: float, util_a: float, util_b: float) -> tuple[float, float]:
    b = SimulatedBackend(seed=0, noise=0.0, predictor=lambda: _Optimistic(speed))  # type: ignore[arg-type,return-value]
    p1, p2 = pod("a", util=util_a), pod("b", util=util_b)
    prof = GraphProfile("m", 1, {})
    s = b.sample(NodeView("n1", inventory()), [p1, p2], {p1.uid: prof, p2.uid: prof})
    u1, u2 = s.pods[p1.uid].utilization, s.pods[p2.uid].utilization
    assert u1 is not None and u2 is not None
    return u1, u2


def test_an_optimistic_pair_model_cannot_lift_a_gpus_time_share() -> None:
    # 88 % + 88 % alone: a time-sliced GPU gives each at most 100/176 of its speed, whatever
    # the pair model says; the agent measures that ratio, not the model's 0.9
    u1, u2 = _pair(0.9, 88.0, 88.0)
    assert abs(u1 / 0.88 - 100 / 176) < 1e-9 and abs(u2 / 0.88 - 100 / 176) < 1e-9
    assert u1 + u2 <= 1.0 + 1e-9


def test_a_pessimistic_pair_model_is_kept_below_the_bound() -> None:
    # the bound is an upper limit only: a model that predicts more slowdown is what is measured
    u1, _ = _pair(0.4, 88.0, 88.0)
    assert abs(u1 - 0.88 * 0.4) < 1e-9
    # and light pairs (summed 60 %) are not bounded at all
    u1, u2 = _pair(0.95, 40.0, 20.0)
    assert abs(u1 - 0.40 * 0.95) < 1e-9 and abs(u2 - 0.20 * 0.95) < 1e-9


def test_true_speed_bounds_known_and_unknown_neighbours() -> None:
    from horus.agent.simulated import MIN_SPEED, true_speed

    assert true_speed([], 1.0) == 1.0  # alone
    assert true_speed([0.9], 0.6) == 0.6  # the model promises more than the GPU has
    assert true_speed([0.5], 0.6) == 0.5
    assert abs(true_speed([0.9, None], 0.5) - 0.45) < 1e-12  # unknown neighbour: contention
    assert true_speed([0.01, 0.01], 1.0) == MIN_SPEED


def test_the_agent_measures_the_bound_not_the_prediction() -> None:
    """Whole measurement path: a pod alone, then beside a neighbour, through the agent's
    utilisation-ratio estimate (feedback.PairSpeeds) — it disagrees with the 0.9 predicted."""
    from horus.agent.feedback import PairSpeeds

    b = SimulatedBackend(seed=0, noise=0.0, predictor=lambda: _Optimistic(0.9))  # type: ignore[arg-type,return-value]
    p1, p2 = pod("a", util=88.0), pod("b", util=88.0)
    prof = GraphProfile("m", 1, {})
    speeds = PairSpeeds(min_samples=3)
    for _ in range(3):
        s = b.sample(NodeView("n1", inventory()), [p1])
        speeds.add("H100", [(p1.uid, None, s.pods[p1.uid].utilization)])
    for _ in range(3):
        s = b.sample(NodeView("n1", inventory()), [p1, p2], {p1.uid: prof, p2.uid: prof})
        speeds.add(
            "H100",
            [
                (p1.uid, "resnet", s.pods[p1.uid].utilization),
                (p2.uid, "resnet", s.pods[p2.uid].utilization),
            ],
        )
    ((speed, n),) = speeds.speeds(p1.uid).values()
    assert n == 3 and abs(speed - 100 / 176) < 1e-9
