import pytest
from agent_helpers import pod

from horus.agent.pods import PodInfo
from horus.agent.watchdog import MemoryWatchdog

MIB = 2**20


class Actions:
    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.evicted: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def evict(self, pod: PodInfo, message: str) -> bool:
        if self.accept:
            self.evicted.append(pod.name)
        return self.accept

    def event(self, pod: PodInfo, reason: str, message: str) -> None:
        self.events.append((pod.name, reason, message))


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def test_evicts_only_after_grace_and_once() -> None:
    acts, clock = Actions(), Clock()
    wd = MemoryWatchdog("evict", 10.0, acts, clock)
    bad, good = pod("bad", mem=2048), pod("good", mem=2048)
    for t in (0, 5, 9.9):
        clock.t = t
        assert wd.check(bad, 3000 * MIB, "simulated") is None
        assert wd.check(good, 1500 * MIB, "simulated") is None
    clock.t = 10.0
    assert wd.check(bad, 3000 * MIB, "simulated") == "evicted"
    assert wd.check(bad, 3000 * MIB, "simulated") is None
    assert acts.evicted == ["bad"]
    _name, reason, msg = acts.events[0]
    assert reason == "GPUMemoryEvicted" and "3000 MiB measured > 2048 MiB allowed" in msg
    assert wd.evictions == {("n1", "ns", "bad", "0"): 1}


def test_dip_below_share_resets_the_episode() -> None:
    acts, clock = Actions(), Clock()
    wd = MemoryWatchdog("evict", 10.0, acts, clock)
    p = pod(mem=2048)
    wd.check(p, 3000 * MIB, "x")
    clock.t = 8
    wd.check(p, 1000 * MIB, "x")
    clock.t = 12
    assert wd.check(p, 3000 * MIB, "x") is None
    assert acts.evicted == []


def test_report_mode_reports_once_and_never_evicts() -> None:
    acts, clock = Actions(), Clock()
    wd = MemoryWatchdog("report", 0.0, acts, clock)
    p = pod(mem=2048)
    assert wd.check(p, 3000 * MIB, "x") == "reported"
    assert wd.check(p, 3000 * MIB, "x") is None
    assert acts.evicted == [] and [e[1] for e in acts.events] == ["GPUMemoryOverShare"]


def test_refused_eviction_is_retried_and_off_does_nothing() -> None:
    acts = Actions(accept=False)
    wd = MemoryWatchdog("evict", 0.0, acts, Clock())
    p = pod(mem=2048)
    assert wd.check(p, 3000 * MIB, "x") is None
    acts.accept = True
    assert wd.check(p, 3000 * MIB, "x") == "evicted"
    off = MemoryWatchdog("off", 0.0, acts, Clock())
    assert off.check(p, 9000 * MIB, "x") is None
    with pytest.raises(ValueError):
        MemoryWatchdog("kill", 0.0, acts)
