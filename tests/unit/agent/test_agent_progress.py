"""Pair speeds from the jobs' own progress (issue 26): windows, pauses, eval phases, batch-size
changes, counters that go back, the kind pool, gangs, and a whole agent on simulated GPUs whose
workloads are slowed by the simulated speed the agent hands them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import KEY, ROOT, NodeApiserver, assignment, pod_obj, sim_agent_settings

from horus.agent.agent import Agent
from horus.agent.feedback import Feedback
from horus.agent.kube import AgentApi
from horus.agent.progress import Context, ProgressSpeeds, median_and_error
from horus.common import constants as c
from horus.progress.mount import progress_mount
from horus.progress.reader import ProgressRecord
from horus.progress.report import ProgressReporter, simulated_speed
from signing_keys import sign_pod, write_public_keys

SOLO = Context("H100", 50)
NEXT_TO_B = Context("H100", 50, "uid-b", "bert@8")


def rec(
    t: float,
    samples: int,
    steps: int | None = None,
    paused: float = 0.0,
    run: str = "r1",
    phase: str = "train",
    wall: float | None = None,
) -> ProgressRecord:
    return ProgressRecord(
        run=run,
        pid=1,
        t=t,
        wall=time.time() if wall is None else wall,
        steps=samples // 32 if steps is None else steps,
        samples=samples,
        paused=paused,
        phase=phase,
    )


def feed(
    ps: ProgressSpeeds,
    uid: str,
    ctx: Context,
    rates: list[float],
    t0: float,
    s0: int = 0,
    dt: float = 5.0,
) -> tuple[float, int]:
    """Windows of ``dt`` seconds at ``rates`` samples/s; returns the last (t, samples)."""
    t, s = t0, s0
    ps.observe(uid, rec(t, s), ctx, "resnet@32", time.time())
    for r in rates:
        t, s = t + dt, s + round(r * dt)
        ps.observe(uid, rec(t, s), ctx, "resnet@32", time.time())
    return t, s


def test_speed_is_the_median_rate_shared_over_alone_with_its_error() -> None:
    ps = ProgressSpeeds(min_windows=3)
    t, s = feed(ps, "a", SOLO, [100, 102, 98, 100, 100], 0.0)
    assert ps.speeds("a") == {}  # never shared yet
    feed(ps, "a", NEXT_TO_B, [60, 61, 59], t + 1, s + 10)  # a new context: a new first read
    ((key, r),) = ps.speeds("a").items()
    assert key == ("bert@8", "H100") and r.source == "progress" and r.samples == 3
    assert r.speed == pytest.approx(0.6) and 0 < r.error < 0.05


def test_eval_marked_or_not_and_pauses_do_not_read_as_slowdown() -> None:
    ps = ProgressSpeeds(min_windows=3)
    t, s = feed(ps, "a", SOLO, [100] * 5, 0.0)
    # a marked 4 s evaluation inside a 5 s window: 100 samples in 1 training second
    ps.observe("a", rec(t + 5, s + 100, paused=4.0), SOLO, "r@32", time.time())
    assert ps.pods["a"].solo[-1] == pytest.approx(100.0)
    # an unmarked checkpoint: a window with no progress at all is dropped
    n = len(ps.pods["a"].solo)
    ps.observe("a", rec(t + 10, s + 100, paused=4.0), SOLO, "r@32", time.time())
    assert len(ps.pods["a"].solo) == n and "pause" in ps.why["a"]
    # a partly stalled window is kept but does not move the median
    ps.observe("a", rec(t + 15, s + 200, paused=4.0), SOLO, "r@32", time.time())
    assert median_and_error(ps.pods["a"].solo)[0] == pytest.approx(100.0)


def test_a_hang_restarts_the_windows_instead_of_reading_slow() -> None:
    ps = ProgressSpeeds(min_windows=3, stale_seconds=30)
    now = time.time()
    ps.observe("a", rec(0, 0, wall=now - 100), SOLO, "k", now - 100)
    ps.observe("a", rec(5, 500, wall=now - 95), SOLO, "k", now - 95)
    # the job writes nothing for 95 s: the record the agent reads does not change
    assert ps.observe("a", rec(5, 500, wall=now - 95), SOLO, "k", now) is None
    assert "paused or hung" in ps.why["a"]
    assert ps.observe("a", rec(5, 500, wall=now - 95), SOLO, "k", now + 5) is None
    # it resumes: its first write starts a new window, the hang is not in any
    assert ps.observe("a", rec(101, 600, wall=now + 6), SOLO, "k", now + 6) is None
    assert ps.observe("a", rec(106, 1100, wall=now + 11), SOLO, "k", now + 11) == 100.0
    assert list(ps.pods["a"].solo) == [100.0, 100.0]


def test_samples_per_second_survive_a_batch_size_change() -> None:
    ps = ProgressSpeeds(min_windows=3)
    t, s, steps = 0.0, 0, 0
    ps.observe("a", rec(t, s, steps=steps), SOLO, "k", time.time())
    for batch in (32, 32, 64, 64):  # steps/s halve when the batch doubles
        t, s, steps = t + 5, s + 500, steps + 500 // batch
        ps.observe("a", rec(t, s, steps=steps), SOLO, "k", time.time())
    assert set(ps.pods["a"].solo) == {100.0}


def test_counters_that_go_back_or_a_new_run_start_afresh() -> None:
    ps = ProgressSpeeds(min_windows=3)
    ps.observe("a", rec(0, 1000), SOLO, "k", time.time())
    assert ps.observe("a", rec(5, 900), SOLO, "k", time.time()) is None
    assert "went back" in ps.why["a"]
    assert ps.observe("a", rec(10, 1400), SOLO, "k", time.time()) == 100.0
    # a restart (new run token): counters begin again, no window across it
    assert ps.observe("a", rec(1, 0, run="r2"), SOLO, "k", time.time()) is None
    assert ps.observe("a", rec(6, 500, run="r2"), SOLO, "k", time.time()) == 100.0
    # neighbours changed within a window: nothing attributed
    assert ps.observe("a", rec(11, 800, run="r2"), NEXT_TO_B, "k", time.time()) is None
    assert ps.observe("a", rec(16, 1100, run="r2"), None, "k", time.time()) is None


def test_a_pod_never_alone_borrows_its_kinds_solo_baseline() -> None:
    ps = ProgressSpeeds(min_windows=3)
    feed(ps, "sibling", SOLO, [100] * 4, 0.0)
    feed(ps, "a", NEXT_TO_B, [50] * 4, 0.0)
    assert ps.speeds("a")[("bert@8", "H100")].speed == pytest.approx(0.5)
    # another share is another baseline: none for a pod at 30 %
    feed(ps, "c", Context("H100", 30, "uid-b", "bert@8"), [50] * 4, 0.0)
    assert ps.speeds("c") == {}


def test_progress_wins_over_utilisation_and_utilisation_stays_for_the_others() -> None:
    fb = Feedback()
    for _ in range(3):
        fb.pairs.add("H100", [("a", None, 0.8)])
        fb.pairs.add("H100", [("a", "resnet@32", 0.4), ("b", "bert@8", 0.4)])
    t, s = feed(fb.progress, "a", SOLO, [100] * 4, 0.0)
    assert fb.readings("a")[("bert@8", "H100")].source == "utilisation"
    feed(fb.progress, "a", NEXT_TO_B, [70] * 4, t + 1, s)
    r = fb.readings("a")[("bert@8", "H100")]
    assert (r.source, r.speed) == ("progress", pytest.approx(0.7))


# --- the whole agent on simulated GPUs ---------------------------------------------------------

NODE = "n1"
UID_A = "3f1c2b4a-1111-4222-8333-944455556666"
UID_B = "7a2d0c1e-2222-4333-8444-a55566667777"


def plain_pod(name: str, uid: str, profile: str, util: float) -> dict[str, Any]:
    from horus.api.assignment import PredictedUsage

    obj = pod_obj(
        name,
        NODE,
        assignment(NODE, 0, core=50),
        sign=False,
        predicted=PredictedUsage(util, util, 1000.0, 1000.0, "test"),
    )
    obj["metadata"]["uid"] = uid
    obj["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE] = (
        ROOT / "examples" / "profiles" / profile
    ).read_text()
    return sign_pod(obj, KEY)


class SimulatedJob:
    """A training loop as examples/workload runs one: 200 samples/s alone, slowed by the
    simulated speed the agent writes into its progress directory."""

    def __init__(self, directory: str) -> None:
        self.t = 1000.0
        self.directory = directory
        self.rep = ProgressReporter(directory, min_interval=0, clock=lambda: self.t)

    def run(self, seconds: float) -> None:
        speed = simulated_speed(self.directory) or 1.0
        self.t += seconds
        self.rep.step(samples=round(200 * speed * seconds), steps=1)


def test_the_agent_measures_the_simulated_speed_from_progress(tmp_path: Path) -> None:
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    root = tmp_path / "progress"
    settings = sim_agent_settings(NODE, key_file)
    settings = type(settings)(**{**settings.__dict__, "progress_root": root, "noise": 0.0})
    api = NodeApiserver(NODE)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    a = SimulatedJob(progress_mount(root, UID_A).host_path)
    b = SimulatedJob(progress_mount(root, UID_B).host_path)
    api.pods = [plain_pod("a", UID_A, "resnet50-bs64.yaml", 80.0)]
    for _ in range(5):
        agent.cycle()
        a.run(5.0)
    assert simulated_speed(a.directory) == 1.0
    api.pods.append(plain_pod("b", UID_B, "bert-base-bs16.yaml", 70.0))
    for _ in range(6):
        agent.cycle()
        a.run(5.0)
        b.run(5.0)
    truth = simulated_speed(a.directory)
    assert truth is not None and truth == pytest.approx(100 / 150, abs=1e-3)  # contention bound
    readings = agent.feedback.readings(UID_A)
    (((_other, model), r),) = readings.items()
    assert model == "H100" and r.source == "progress" and r.speed == pytest.approx(truth, abs=0.01)
    # b never ran alone and no pod of its kind did: no progress speed, utilisation has none
    assert agent.feedback.readings(UID_B) == {}


def test_a_hostile_progress_file_is_refused_once_and_utilisation_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job writes what it likes into its progress directory: a link to a host file, a FIFO,
    garbage. The agent reads none of them, says so once, and goes on measuring utilisation."""
    import logging
    import os

    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    root = tmp_path / "progress"
    settings = sim_agent_settings(NODE, key_file)
    settings = type(settings)(**{**settings.__dict__, "progress_root": root})
    api = NodeApiserver(NODE)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    where = Path(progress_mount(root, UID_A).host_path)
    secret = tmp_path / "shadow"
    secret.write_text(json.dumps({"format": "horus-progress/1"}))
    (where / "progress.json").symlink_to(secret)
    api.pods = [plain_pod("a", UID_A, "resnet50-bs64.yaml", 80.0)]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            snap = agent.cycle()
    said = [r.getMessage() for r in caplog.records if "progress file refused" in r.getMessage()]
    assert len(said) == 1 and "symbolic link" in said[0]
    assert snap.samples[0].pods[UID_A].utilization is not None  # utilisation still measured
    assert agent.feedback.pairs.solo[UID_A].n == 3
    (where / "progress.json").unlink()
    os.mkfifo(where / "progress.json")
    agent.cycle()  # a FIFO: refused without blocking the cycle
    assert not agent.feedback.progress.reporting(UID_A)


def test_gang_windows_are_attributed_only_where_one_replica_shares(tmp_path: Path) -> None:
    """A gang runs at its slowest replica's pace: its replicas are solo only when none shares,
    a pair is attributed only to the one replica that shares (with exactly one pod), and a gang
    with a replica this agent does not see is not attributed at all."""
    from agent_helpers import pod as info

    from horus.agent.backend import GpuSample, NodeSample, PodSample
    from horus.agent.exporter import Snapshot
    from horus.predictor.interface import GraphProfile

    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    agent = Agent(
        sim_agent_settings(NODE, key_file), AgentApi(NodeApiserver(NODE)), predictor=lambda: None
    )
    replicas = {"gang": 2, "far": 3}
    agent._replica_count = lambda p: replicas.get(p.job or "", 1)  # type: ignore[method-assign]
    agent._profile = lambda p: GraphProfile(p.name, 8, {})  # type: ignore[method-assign]

    def contexts(*pods: Any) -> dict[str, Context | None]:
        snap = Snapshot(pods={p.uid: p for p in pods})
        sample = NodeSample(
            NODE,
            "simulated",
            [GpuSample(i, f"GPU-{i}", "H100", 0.5, 0.0, 1.0) for i in range(4)],
            {p.uid: PodSample(0.0, 0.5) for p in pods},
        )
        return agent._contexts(sample, snap)

    g0, g1 = info("g0", gpu=0, job="gang"), info("g1", gpu=1, job="gang")
    x, y = info("x", gpu=1), info("y", gpu=0)
    alone = contexts(g0, g1)
    assert alone[g0.uid] == Context("H100", 50) and alone[g1.uid] == Context("H100", 50)
    one = contexts(g0, g1, x)  # x shares g1's GPU
    assert one[g1.uid] == Context("H100", 50, x.uid, "x@8")
    assert one[g0.uid] is None  # slowed through its sibling: neither solo nor that pair
    # x itself shares with exactly one pod: its window is x beside g1's kind
    assert one[x.uid] == Context("H100", 50, g1.uid, "g1@8")
    both = contexts(g0, g1, x, y)  # two replicas share: nothing attributable
    assert both[g0.uid] is None and both[g1.uid] is None
    far = info("f0", gpu=2, job="far")  # 3 replicas, one visible
    assert contexts(far)[far.uid] is None


def test_a_job_with_long_steps_is_not_taken_for_a_hung_one() -> None:
    """A step of 40 s means a write every 40 s: longer than the 30 s stale rule, yet no hang."""
    ps = ProgressSpeeds(min_windows=3, stale_seconds=30)
    now = time.time()
    rates = []
    for k in range(16):  # agent reads every 10 s, the job writes every 40 s
        t_job = 40.0 * (k // 4)
        r = rec(t_job, int(t_job * 10), wall=now + t_job)
        rates.append(ps.observe("a", r, SOLO, "k", now + 10.0 * k + 1))
    # the first silence looks like a hang; from then on the 40 s gap is known
    assert [x for x in rates if x is not None] == [10.0, 10.0]
