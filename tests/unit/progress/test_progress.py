"""The progress file: the job's writer, the node's validating reader, the per-pod mount and
the framework adapters (issue 26)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from horus.progress.adapters import (
    HFHooks,
    LightningHooks,
    batch_len,
    hf_callback,
    lightning_callback,
    progress_batches,
)
from horus.progress.mount import CONTAINER_DIR, progress_mount, remove_stale
from horus.progress.reader import (
    ProgressError,
    parse_progress,
    read_progress,
    write_simulated_speed,
)
from horus.progress.report import (
    ENV_DIR,
    FILE_NAME,
    FORMAT,
    MAX_FILE_BYTES,
    SIM_SPEED_FILE,
    ProgressReporter,
    simulated_speed,
)

UID = "3f1c2b4a-1111-4222-8333-944455556666"


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def reporter(tmp_path: Path, clock: Clock, interval: float = 1.0) -> ProgressReporter:
    return ProgressReporter(tmp_path, min_interval=interval, clock=clock, wall=lambda: 1.7e9)


def test_reporter_writes_a_record_the_reader_accepts(tmp_path: Path) -> None:
    clock = Clock()
    rep = reporter(tmp_path, clock)
    rep.step(samples=32)  # first step: written at once
    first = read_progress(tmp_path)
    assert first is not None and (first.steps, first.samples, first.phase) == (1, 32, "train")
    clock.t += 0.5
    rep.step(samples=32)  # within min_interval: not rewritten
    assert read_progress(tmp_path) == first
    clock.t += 0.6
    rep.step(samples=64)  # batch size changed: samples count on
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples, rec.t) == (3, 128, 101.1)
    assert rec.run == first.run  # one reporter, one run
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed


def test_phase_time_is_counted_as_paused(tmp_path: Path) -> None:
    clock = Clock()
    rep = reporter(tmp_path, clock)
    rep.step(samples=8)
    with rep.phase("eval"):
        clock.t += 7.0
        mid = read_progress(tmp_path)
        assert mid is not None and mid.phase == "eval"
    rec = read_progress(tmp_path)
    assert rec is not None and rec.phase == "train" and rec.paused == pytest.approx(7.0)
    rep.close()
    done = read_progress(tmp_path)
    assert done is not None and done.phase == "done"
    with pytest.raises(ValueError):
        rep.begin_phase("lunch")


def test_reporter_without_a_directory_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DIR, raising=False)
    rep = ProgressReporter()
    rep.step(samples=4)
    assert not rep.enabled and rep.steps == 1


def test_unwritable_directory_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    rep = ProgressReporter(tmp_path / "missing", min_interval=0)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        rep.step()
    rep.step()  # no second warning, no exception
    assert rep.steps == 2


def good() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "run": "abc123",
        "pid": 7,
        "t": 10.0,
        "wall": 1.7e9,
        "steps": 5,
        "samples": 160,
        "paused": 1.0,
        "phase": "train",
    }


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"format": "horus-progress/2"}, "format"),
        ({"run": "../etc"}, "run"),
        ({"run": "x" * 65}, "run"),
        ({"steps": -1}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"samples": 2**60}, "samples"),
        ({"t": float("nan")}, "t"),
        ({"t": "10"}, "t"),
        ({"wall": 1e300}, "wall"),
        ({"paused": 11.0}, "paused"),
        ({"phase": "sleeping"}, "phase"),
        ({"pid": -3}, "pid"),
    ],
)
def test_reader_refuses_invalid_fields(change: dict[str, Any], why: str) -> None:
    obj = good() | change
    data = json.dumps(obj).encode()  # NaN is written as JSON's NaN, which json reads back
    with pytest.raises(ProgressError, match=why):
        parse_progress(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[1, 2]",
        b"\xff\xfe",
        b"[" * 5000,
        json.dumps(good() | {"pad": "x" * MAX_FILE_BYTES}).encode(),
    ],
)
def test_reader_refuses_garbage(data: bytes) -> None:
    with pytest.raises(ProgressError):
        parse_progress(data)


def test_reader_accepts_the_documented_record() -> None:
    rec = parse_progress(json.dumps(good()).encode())
    assert (rec.steps, rec.samples, rec.paused, rec.t) == (5, 160, 1.0, 10.0)


def test_reader_does_not_follow_links_or_block_on_fifos(tmp_path: Path) -> None:
    assert read_progress(tmp_path) is None  # a job that does not report
    secret = tmp_path / "host-secret"
    secret.write_text(json.dumps(good()))
    (tmp_path / FILE_NAME).symlink_to(secret)
    with pytest.raises(ProgressError, match="link"):
        read_progress(tmp_path)
    (tmp_path / FILE_NAME).unlink()
    os.mkfifo(tmp_path / FILE_NAME)
    with pytest.raises(ProgressError, match="not a regular file"):
        read_progress(tmp_path)
    (tmp_path / FILE_NAME).unlink()
    (tmp_path / FILE_NAME).write_bytes(b" " * (MAX_FILE_BYTES * 10))
    with pytest.raises(ProgressError, match="larger"):
        read_progress(tmp_path)


def test_simulated_speed_round_trip_and_hostile_leftovers(tmp_path: Path) -> None:
    assert simulated_speed(tmp_path) is None
    target = tmp_path / "elsewhere"
    (tmp_path / f".{SIM_SPEED_FILE}.agent.tmp").symlink_to(target)  # left by the job
    (tmp_path / SIM_SPEED_FILE).symlink_to(target)
    write_simulated_speed(tmp_path, 0.42)
    assert not target.exists()  # neither link was written through
    assert simulated_speed(tmp_path) == 0.42
    write_simulated_speed(tmp_path, 7.0)
    assert simulated_speed(tmp_path) == 1.0
    (tmp_path / SIM_SPEED_FILE).write_text('{"format": "x", "speed": 0.3}')
    assert simulated_speed(tmp_path) is None


def test_progress_mount_is_per_pod_and_refuses_non_uids(tmp_path: Path) -> None:
    m = progress_mount(tmp_path / "progress", UID)
    assert m.host_path == str(tmp_path / "progress" / UID) and m.container_path == CONTAINER_DIR
    assert m.env == {ENV_DIR: CONTAINER_DIR}
    assert (os.stat(m.host_path).st_mode & 0o777) == 0o777
    for bad in ("../x", "", UID.upper(), f"{UID}/..", "a" * 36):
        with pytest.raises(ValueError):
            progress_mount(tmp_path / "progress", bad)
    other = "7a2d0c1e-2222-4333-8444-a55566667777"
    progress_mount(tmp_path / "progress", other)
    (tmp_path / "progress" / "not-a-pod").mkdir()
    assert remove_stale(tmp_path / "progress", [UID]) == [other]
    assert sorted(p.name for p in (tmp_path / "progress").iterdir()) == [UID, "not-a-pod"]


# --- adapters --------------------------------------------------------------------------------


class Batch:
    def __init__(self, n: int) -> None:
        self.shape = (n, 3)


def test_batch_len() -> None:
    assert batch_len(Batch(8)) == 8
    assert batch_len((Batch(4), Batch(4))) == 4
    assert batch_len({"input_ids": Batch(16), "labels": Batch(16)}) == 16
    assert batch_len([1, 2, 3]) == 3
    assert batch_len(object()) is None and batch_len(()) is None


def test_plain_loop_counts_steps_after_the_body(tmp_path: Path) -> None:
    rep = ProgressReporter(tmp_path, min_interval=0)
    seen = []
    for b in progress_batches([Batch(2), Batch(2), Batch(5)], rep):
        seen.append((rep.steps, b.shape[0]))
    assert seen == [(0, 2), (1, 2), (2, 5)]
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples, rec.phase) == (3, 9, "done")


def test_plain_loop_with_real_torch_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    data = torch.utils.data.TensorDataset(torch.zeros(10, 2), torch.zeros(10))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    rep = ProgressReporter(tmp_path, min_interval=0)
    for _ in progress_batches(loader, rep):
        pass
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples) == (3, 10)


# The real frameworks are not installed in this project's environment (checked below): the hooks
# are exercised through duck-typed stand-ins with the frameworks' call signatures; where the
# framework is installed the factory's object (a subclass of its real base) is used instead.
HAS_LIGHTNING = any(importlib.util.find_spec(m) for m in ("lightning", "pytorch_lightning"))
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def test_lightning_hooks(tmp_path: Path) -> None:
    clock = Clock()
    rep = ProgressReporter(tmp_path, min_interval=0, clock=clock)
    cb: Any = lightning_callback(rep) if HAS_LIGHTNING else LightningHooks(rep)
    trainer = SimpleNamespace(local_rank=0, sanity_checking=False)
    for i in range(3):
        cb.on_train_batch_end(trainer, None, None, (Batch(16), Batch(16)), i)
        clock.t += 1
    cb.on_validation_start(trainer, None)
    clock.t += 4
    cb.on_validation_end(trainer, None)
    cb.on_train_batch_end(SimpleNamespace(local_rank=1), None, None, Batch(16), 3)  # not rank 0
    cb.on_train_end(trainer, None)
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples, rec.paused, rec.phase) == (
        3,
        48,
        4.0,
        "done",
    )


def test_lightning_factory_says_what_is_missing() -> None:
    if HAS_LIGHTNING:
        pytest.skip("Lightning is installed")
    with pytest.raises(ImportError, match="lightning"):
        lightning_callback()


def test_hf_hooks(tmp_path: Path) -> None:
    clock = Clock()
    rep = ProgressReporter(tmp_path, min_interval=0, clock=clock)
    cb: Any = hf_callback(rep) if HAS_TRANSFORMERS else HFHooks(rep)
    args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=2)
    state = SimpleNamespace(global_step=0, is_local_process_zero=True, train_batch_size=None)
    idle = SimpleNamespace(should_evaluate=False, should_save=False)
    for step in (1, 2):
        state.global_step = step
        cb.on_step_end(args, state, idle)
        clock.t += 1
    state.global_step = 3
    cb.on_step_end(args, state, SimpleNamespace(should_evaluate=True, should_save=True))
    clock.t += 5  # evaluating
    cb.on_evaluate(args, state, SimpleNamespace(should_save=True))
    clock.t += 2  # saving
    cb.on_save(args, state, idle)
    state.global_step, state.train_batch_size = 4, 4  # batch size changed
    cb.on_step_end(args, state, idle)
    cb.on_train_end(args, state, idle)
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples, rec.paused, rec.phase) == (
        4,
        3 * 16 + 8,
        7.0,
        "done",
    )


def test_hf_factory_says_what_is_missing() -> None:
    if HAS_TRANSFORMERS:
        pytest.skip("transformers is installed")
    with pytest.raises(ImportError, match="Transformers"):
        hf_callback()
