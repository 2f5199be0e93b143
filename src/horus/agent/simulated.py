"""The simulated GPU backend: what a physical GPU would report, generated from the predictor.

kwok nodes and CI have no GPU, yet the exporter, watchdog and feedback loop must run end to end.
This backend produces each pod's numbers from what the scheduler already wrote on it:

* **Utilisation** of pod *i* alone is its ``horus.io/predicted`` ``utilMean`` (without a
  prediction: 80 % of its core share). Sharing a GPU slows it: its speed is the product of the
  predictor's pairwise ``pair_speed(i, j)`` over its neighbours *j* when both graph profiles are
  known, else (for the neighbours whose profile is unknown) the contention fallback
  ``min(1, 100 / Σ util)``. Utilisation scales with speed; the GPU's total is capped at 100 %,
  and under MPS enforcement a pod is capped at its core share. Multiplicative Gaussian noise
  (``noise``, seeded) makes the series look measured.
* **A physical bound the pair model cannot lift.** What this stands in for is a GPU's time:
  jobs that together want more than 100 % of it are time-sliced (or share its SMs under MPS),
  so none runs faster than ``min(1, 100 / Σ util)`` of its speed alone, where ``Σ util`` sums
  the GPU's pods' utilisations alone. The pair model learned on other GPUs and other jobs
  (``docs/predictor.md``: on Lucid's RTX 3090, which it never saw pairs on, its mean error is
  0.236 per pair speed) and may promise more; the backend reports ``min(pair-model product, that bound)``. Without the
  bound the agent would measure exactly what the scheduler predicted, so a measured pair could
  never disagree with the prediction that placed it, and the operator's run-time correction
  (moves, ``docs/operator.md``) would have nothing to correct on simulated nodes.
* **Memory** is ``memoryMiBMean`` of the prediction (±1 % noise; without a prediction 60 % of
  the share), or exactly the value of the TEST/DEMO-ONLY annotation
  ``horus.io/simulated-memory-mib`` — the way a test makes a pod exceed its share.

Every sample says ``backend="simulated"``, which the exporter puts on every series and the agent
in every log line about it.
"""

from __future__ import annotations

import logging
import math
import random
import zlib
from collections.abc import Callable, Mapping, Sequence

from horus.agent.backend import GpuSample, NodeSample, NodeView, PodSample
from horus.agent.pods import PodInfo
from horus.common.constants import BACKEND_SIMULATED, MIB
from horus.predictor.interface import GraphProfile, Predictor

log = logging.getLogger("horus.agent.simulated")

MIN_SPEED = 0.05
FALLBACK_UTIL_OF_SHARE = 0.8
FALLBACK_MEMORY_OF_SHARE = 0.6


class SimulatedBackend:
    """Generates GPU readings for simulated (kwok) nodes; see the module docstring."""

    def __init__(
        self,
        seed: int = 0,
        noise: float = 0.05,
        cap_to_core_share: bool = False,
        predictor: Callable[[], Predictor | None] | None = None,
    ) -> None:
        self._seed = seed
        self._noise = noise
        self._cap = cap_to_core_share
        self._predictor_factory = predictor
        self._predictor: Predictor | None = None
        self._predictor_loaded = False
        self._rngs: dict[str, random.Random] = {}
        self._pair_cache: dict[tuple[str, str, str], float] = {}
        #: SIMULATION ONLY: each pod's true speed in the last sample (1 alone, less when
        #: sharing), which the agent hands to the pod's workload (its progress directory's
        #: simulated-speed file), so a simulated job slows down as the simulation says.
        self.speeds: dict[str, float] = {}

    @property
    def name(self) -> str:
        return BACKEND_SIMULATED

    def close(self) -> None:
        return None

    def _rng(self, node: str) -> random.Random:
        rng = self._rngs.get(node)
        if rng is None:
            rng = random.Random(self._seed ^ zlib.crc32(node.encode()))
            self._rngs[node] = rng
        return rng

    def _get_predictor(self) -> Predictor | None:
        if not self._predictor_loaded:
            self._predictor_loaded = True
            if self._predictor_factory is not None:
                try:
                    self._predictor = self._predictor_factory()
                except Exception as exc:  # a broken artifact must not stop the simulation
                    log.warning(
                        "simulated backend: predictor unavailable (%s); using the contention "
                        "fallback for interference",
                        exc,
                    )
        return self._predictor

    def _pair_speed(
        self, a: PodInfo, b: PodInfo, profiles: Mapping[str, GraphProfile], gpu: str
    ) -> float | None:
        pa, pb = profiles.get(a.uid), profiles.get(b.uid)
        if pa is None or pb is None:
            return None
        key = (a.uid, b.uid, gpu)
        if key not in self._pair_cache:
            predictor = self._get_predictor()
            if predictor is None:
                return None
            try:
                self._pair_cache[key] = float(predictor.pair_speed(pa, pb, gpu))
            except Exception as exc:
                log.warning("simulated backend: pair_speed(%s, %s) failed: %s", a.key, b.key, exc)
                return None
            if len(self._pair_cache) > 100_000:
                self._pair_cache.clear()
        return self._pair_cache[key]

    def sample(
        self,
        node: NodeView,
        pods: Sequence[PodInfo],
        profiles: Mapping[str, GraphProfile] | None = None,
    ) -> NodeSample:
        rng = self._rng(node.name)
        profiles = profiles or {}
        for pod in pods:
            self.speeds.pop(pod.uid, None)
        by_gpu: dict[int, list[PodInfo]] = {}
        for pod in pods:
            by_gpu.setdefault(pod.assignment.gpu_index, []).append(pod)
        gpus: list[GpuSample] = []
        pod_samples: dict[str, PodSample] = {}
        for dev in node.inventory:
            group = by_gpu.get(dev.index, [])
            alone = {p.uid: self._alone_util(p) for p in group}
            total_alone = sum(alone.values())
            utils: dict[str, float] = {}
            contention = min(1.0, 100.0 / total_alone) if total_alone > 0 else 1.0
            for p in group:
                pairs = [
                    self._pair_speed(p, q, profiles, dev.model) for q in group if q.uid != p.uid
                ]
                speed = true_speed(pairs, contention)
                self.speeds[p.uid] = speed
                u = alone[p.uid] * speed * max(0.0, rng.gauss(1.0, self._noise))
                if self._cap:
                    u = min(u, float(p.assignment.core_percent))
                utils[p.uid] = max(0.0, u)
            total = sum(utils.values())
            if total > 100.0:
                utils = {k: v * 100.0 / total for k, v in utils.items()}
                total = 100.0
            total_bytes = float(dev.memory_mib) * MIB
            used = 0.0
            for p in group:
                mem = self._memory_mib(p, rng) * MIB
                used += mem
                pod_samples[p.uid] = PodSample(
                    memory_used_bytes=mem, utilization=utils[p.uid] / 100.0
                )
            gpus.append(
                GpuSample(
                    index=dev.index,
                    uuid=dev.uuid,
                    model=dev.model,
                    utilization=min(1.0, total / 100.0),
                    memory_used_bytes=min(used, total_bytes),
                    memory_total_bytes=total_bytes,
                    healthy=dev.healthy,
                )
            )
        return NodeSample(node=node.name, backend=self.name, gpus=gpus, pods=pod_samples)

    @staticmethod
    def _alone_util(pod: PodInfo) -> float:
        if pod.predicted is not None:
            return float(pod.predicted.util_mean)
        return FALLBACK_UTIL_OF_SHARE * pod.assignment.core_percent

    @staticmethod
    def _memory_mib(pod: PodInfo, rng: random.Random) -> float:
        if pod.simulated_memory_mib is not None:
            return pod.simulated_memory_mib
        if pod.predicted is not None:
            base = float(pod.predicted.memory_mib_mean)
        else:
            base = FALLBACK_MEMORY_OF_SHARE * pod.assignment.memory_mib
        return max(0.0, base * (1.0 + 0.01 * max(-3.0, min(3.0, rng.gauss(0.0, 1.0)))))


def true_speed(pair_speeds: Sequence[float | None], contention: float) -> float:
    """A pod's speed beside its neighbours (module docstring): the product of the pair model's
    speeds (``None`` where a neighbour's profile is unknown: ``contention`` stands in for
    those), never above ``contention`` = ``min(1, 100 / Σ util alone)``, the share of a
    time-sliced GPU; at least ``MIN_SPEED``."""
    speed = math.prod(s for s in pair_speeds if s is not None)
    if any(s is None for s in pair_speeds):
        speed *= contention
    return max(MIN_SPEED, min(1.0, contention, speed))
