"""The process state file round-trips, files from older versions still load, and free ports
for components are picked where outgoing connections do not take them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from horus.devcluster.processes import ManagedProcess, load_state_fields, save_state


@dataclass
class _State:
    directory: str
    processes: list[ManagedProcess] = field(default_factory=list)


def test_round_trip(tmp_path: Path) -> None:
    state = _State(str(tmp_path), [ManagedProcess("etcd", 123, str(tmp_path), "etcd.log")])
    save_state(tmp_path / "state.json", state)
    raw = load_state_fields(tmp_path / "state.json")
    assert raw is not None and _State(**raw) == state
    assert load_state_fields(tmp_path / "missing.json") is None


def test_old_state_file_with_binary_field_loads(tmp_path: Path) -> None:
    old = {
        "directory": str(tmp_path),
        "processes": [{"name": "etcd", "pid": 1, "binary": "/usr/bin/etcd", "log": "x.log"}],
    }
    (tmp_path / "state.json").write_text(json.dumps(old))
    raw = load_state_fields(tmp_path / "state.json")
    assert raw is not None
    assert raw["processes"] == [ManagedProcess("etcd", 1, str(tmp_path), "x.log")]


def test_a_pid_running_something_else_is_not_ours(tmp_path: Path) -> None:
    # PID 1 exists but its command line does not name our folder: never ours.
    assert not ManagedProcess("x", 1, str(tmp_path / "folder"), "x.log").running()


def test_a_child_inside_exec_is_not_declared_gone(tmp_path: Path, monkeypatch) -> None:
    """/proc/<pid>/cmdline reads empty for a moment during execve(); that is not 'exited'."""
    import os

    real = Path.read_bytes
    reads = {"n": 0}

    def flaky(self: Path) -> bytes:
        if self.name == "cmdline":
            reads["n"] += 1
            if reads["n"] <= 2:
                return b""
            return f"/bin/tool --dir={tmp_path}\0".encode()
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", flaky)
    assert ManagedProcess("me", os.getpid(), str(tmp_path), "x.log").running()
    assert reads["n"] == 3


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    """Components' ports never come from the range the kernel gives outgoing connections
    (one of the cluster's own clients took such a port before etcd could bind it)."""
    import socket

    from horus.devcluster.processes import _ephemeral_range, free_port

    ephemeral = _ephemeral_range()
    held = []
    try:
        ports = [free_port() for _ in range(40)]
        assert len(set(ports)) == len(ports)
        assert not [p for p in ports if p in ephemeral]
        for p in ports:
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            held.append(s)
    finally:
        for s in held:
            s.close()
