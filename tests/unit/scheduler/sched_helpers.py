"""Small hand-made predictors and clusters for scheduler tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.scheduler import ClusterState, JobRequest


class TablePredictor:
    """Predictions and pair speeds from dicts keyed by model name (``profile.model``)."""

    def __init__(
        self,
        usage: Mapping[str, tuple[float, float]],
        pairs: Mapping[tuple[str, str], float] | None = None,
        default_speed: float = 0.9,
    ) -> None:
        self.usage = dict(usage)  # model -> (util %, memory MiB)
        self.pairs = dict(pairs or {})
        self.default_speed = default_speed

    @property
    def version(self) -> str:
        return "table-test"

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        util, mem = self.usage[profile.model]
        return ResourcePrediction(util, min(100.0, util * 1.1), mem, mem * 1.05)

    def predict_many(self, profiles: Sequence[GraphProfile], gpu: str) -> list[ResourcePrediction]:
        return [self.predict(p, gpu) for p in profiles]

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        return self.pairs.get((job.model, other.model), self.default_speed)


def synthetic_predictor(
    usage: Sequence[tuple[float, float]], base: float, steps: int
) -> TablePredictor:
    """Models ``m0``, ``m1``, … using ``usage[i]`` (util %, memory MiB), with deterministic
    pair speeds spread over ``base + 0.1 × ((7i + 3j) mod steps)`` (asymmetric, some below the
    policies' speed floor)."""
    models = {f"m{i}": (float(u), float(m)) for i, (u, m) in enumerate(usage)}
    pairs = {
        (a, b): base + 0.1 * ((i * 7 + j * 3) % steps)
        for i, a in enumerate(models)
        for j, b in enumerate(models)
    }
    return TablePredictor(models, pairs)


def cluster(nodes: int, gpus: int, memory_mib: int = 24576, model: str = "RTX3090") -> ClusterState:
    inv = {}
    for n in range(nodes):
        name = f"node-{n}"
        inv[name] = [
            GpuDevice(i, simulated_gpu_uuid(name, i), model, memory_mib) for i in range(gpus)
        ]
    return ClusterState.from_inventory(inv)


def job(name: str, model: str, submit: float = 0.0, **kw: object) -> JobRequest:
    return JobRequest(
        name=name,
        profile=GraphProfile(model=model, batch_size=32),
        submit_time=submit,
        **kw,  # type: ignore[arg-type]
    )
