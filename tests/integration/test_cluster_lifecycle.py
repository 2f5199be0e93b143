"""`horus dev cluster` as a user meets it: up, up again, status, down, down again, bad builds.

These start their own throw-away cluster (not the session one) because they stop it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from horus.devcluster.binaries import repo_root
from horus.devcluster.cluster import ClusterState
from horus.devcluster.processes import port_open

BUILD = repo_root() / "tools" / "controlplane" / "build.sh"


def horus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "horus", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_up_twice_status_down_twice(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    up = horus("dev", "cluster", "--dir", str(folder), "up")
    assert up.returncode == 0, up.stderr
    assert f"export KUBECONFIG={folder / 'kubeconfig'}" in up.stdout
    state = ClusterState.load(folder)
    assert state is not None
    assert {p.name for p in state.processes} == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
    try:
        again = horus("dev", "cluster", "--dir", str(folder), "up")
        assert again.returncode == 2
        assert "already up" in again.stderr and "down" in again.stderr
        # Still exactly one copy of each component.
        assert ClusterState.load(folder) == state

        status = horus("dev", "cluster", "--dir", str(folder), "status")
        assert status.returncode == 0 and "ready=True" in status.stdout
        assert status.stdout.count("running") == 5
    finally:
        down = horus("dev", "cluster", "--dir", str(folder), "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not any(p.running() for p in state.processes)
    assert not any(port_open(port) for port in state.ports.values())
    assert not folder.exists()

    again = horus("dev", "cluster", "--dir", str(folder), "down")
    assert again.returncode == 0 and "nothing to stop" in again.stdout
    status = horus("dev", "cluster", "--dir", str(folder), "status")
    assert status.returncode == 1 and "no local cluster" in status.stdout


def test_add_nodes_without_cluster_says_so(tmp_path: Path) -> None:
    proc = horus("dev", "cluster", "--dir", str(tmp_path / "none"), "add-nodes", "--count", "1")
    assert proc.returncode == 2 and "run 'horus dev cluster up' first" in proc.stderr


def test_bad_node_shape_is_refused(tmp_path: Path) -> None:
    proc = horus("dev", "cluster", "--dir", str(tmp_path), "add-nodes", "--count", "0")
    assert proc.returncode == 2 and "--count: must be a whole number from 1 to 10000" in proc.stderr


def test_missing_go_toolchain_names_the_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HORUS_BIN_DIR"}
    env["HORUS_CACHE_DIR"] = str(tmp_path / "empty-cache")
    # A PATH with the script's ordinary tools and no Go.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("awk", "sed", "mkdir", "dirname", "mktemp", "rm", "mv", "cat"):
        found = shutil.which(name)
        assert found, name
        (tools / name).symlink_to(found)
    env["PATH"] = str(tools)
    bash = shutil.which("bash")
    assert bash
    proc = subprocess.run([bash, str(BUILD)], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert "step 'find Go toolchain' failed" in proc.stderr
    assert "Install Go" in proc.stderr


def test_failed_build_names_the_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HORUS_BIN_DIR"}
    env.update(
        HORUS_CACHE_DIR=str(tmp_path / "cache"),
        GOPROXY="off",  # nothing can be downloaded, and the module cache below is empty
        GOMODCACHE=str(tmp_path / "modcache"),
        GOCACHE=str(tmp_path / "gocache"),
    )
    proc = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 1
    assert "step 'go build kube-apiserver' failed" in proc.stderr
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)
