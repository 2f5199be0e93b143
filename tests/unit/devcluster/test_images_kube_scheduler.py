"""The Horus scheduler's kube-scheduler image (issue 21): built from the control-plane binaries
folder (its build context), tagged with their Kubernetes version, the binary at the path the
upstream image has it. The binary here is a stand-in script printing a version; the real one
is the static build of tools/controlplane/build.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from horus.common.errors import ClusterError
from horus.devcluster.binaries import repo_root
from horus.devcluster.images import (
    IMAGES,
    LOCAL_REGISTRY,
    binary_tag,
    build,
    coredns_version,
    kubernetes_version,
)


def _bin_dir(tmp_path: Path, prints: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    binary = folder / "kube-scheduler"
    binary.write_text(f"#!/bin/sh\necho '{prints}'\n")
    binary.chmod(0o755)
    return folder


def test_kubernetes_version_reads_the_binary(tmp_path: Path) -> None:
    assert kubernetes_version(_bin_dir(tmp_path, "Kubernetes v1.34.4")) == "v1.34.4"


@pytest.mark.parametrize("prints", ["v1.34.4", "Kubernetes 1.34.4", "Kubernetes v1 extra"])
def test_kubernetes_version_refuses_odd_output(tmp_path: Path, prints: str) -> None:
    with pytest.raises(ClusterError, match=re.escape("not 'Kubernetes vX.Y.Z'")):
        kubernetes_version(_bin_dir(tmp_path, prints))


def test_kubernetes_version_without_a_binary_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=re.escape("tools/controlplane/build.sh")):
        kubernetes_version(tmp_path)


@pytest.mark.skipif(
    shutil.which("buildah") is None or os.geteuid() != 0,
    reason="buildah (tools/dev/setup.sh installs it) as root",
)
def test_kube_scheduler_image_from_the_binaries_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HORUS_CACHE_DIR", str(tmp_path / "cache"))
    assert IMAGES["kube-scheduler"].binary == "kube-scheduler"
    bins = _bin_dir(tmp_path, "Kubernetes v1.34.4")
    (image,) = build(repo_root(), ["kube-scheduler"], log=lambda _: None, bin_dir=bins)
    assert image.ref == f"{LOCAL_REGISTRY}/kube-scheduler:v1.34.4"
    blobs = Path(image.layout) / "blobs" / "sha256"
    manifest = json.loads((blobs / image.manifest_digest[7:]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_text())["config"]
    assert config["Entrypoint"] == ["/usr/local/bin/kube-scheduler"]
    assert config["User"] == "65532:65532"
    (layer,) = manifest["layers"]
    with tarfile.open(blobs / layer["digest"][7:]) as tar:
        member = next(
            m for m in tar.getmembers() if m.name.endswith("usr/local/bin/kube-scheduler")
        )
        assert member.mode & 0o111
        got = tar.extractfile(member)
        assert got is not None and got.read() == (bins / "kube-scheduler").read_bytes()
    # cached by content: the same binary is found again, a changed one is built anew
    (again,) = build(repo_root(), ["kube-scheduler"], log=lambda _: None, bin_dir=bins)
    assert again.manifest_digest == image.manifest_digest
    (bins / "kube-scheduler").write_text("#!/bin/sh\necho 'Kubernetes v1.34.5'\n")
    (changed,) = build(repo_root(), ["kube-scheduler"], log=lambda _: None, bin_dir=bins)
    assert changed.ref.endswith(":v1.34.5") and changed.manifest_digest != image.manifest_digest


def test_coredns_version_reads_the_binary(tmp_path: Path) -> None:
    binary = tmp_path / "coredns"
    binary.write_text("#!/bin/sh\necho CoreDNS-1.15.0; echo linux/amd64, go1.26.8, v1.15.0\n")
    binary.chmod(0o755)
    assert coredns_version(tmp_path) == "v1.15.0"
    binary.write_text("#!/bin/sh\necho 1.15.0\n")
    with pytest.raises(ClusterError, match=re.escape("not 'CoreDNS-X.Y.Z'")):
        coredns_version(tmp_path)


def test_pause_image_is_tagged_by_the_program_s_content(tmp_path: Path) -> None:
    (tmp_path / "horus-pause").write_bytes(b"program")
    tag = binary_tag(tmp_path, "horus-pause")
    assert len(tag) == 12
    (tmp_path / "horus-pause").write_bytes(b"program 2")
    assert binary_tag(tmp_path, "horus-pause") != tag
    with pytest.raises(ClusterError, match=re.escape("tools/controlplane/build.sh")):
        binary_tag(tmp_path / "nowhere", "horus-pause")
