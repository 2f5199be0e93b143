"""Image builds with buildah (issue 28): what the local build reads from a Dockerfile (only
its bases), the Debian stand-in's naming rule, the fingerprint that spares an unchanged image
buildah's COPY --from check, and real buildah builds FROM scratch — .dockerignore honoured,
every step cached, a changed source rebuilt, the image in the OCI layout under its name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from horus.common.errors import ValidationError
from horus.devcluster import image_cache, image_prune, images
from horus.devcluster.image_base import base_suite, bases
from horus.devcluster.images import IMAGES, fingerprint

ROOT = Path(__file__).resolve().parents[3]

needs_buildah = pytest.mark.skipif(
    shutil.which("buildah") is None or os.geteuid() != 0,
    reason="buildah (tools/dev/setup.sh installs it) as root",
)


def test_every_shipped_dockerfile_names_only_bases_the_local_build_can_stand_in() -> None:
    for spec in IMAGES.values():
        for base in bases(ROOT / spec.dockerfile):
            assert base_suite(base) == "bookworm", (spec.dockerfile, base)
    # the build stage and scratch are not bases
    assert bases(ROOT / "operator" / "Dockerfile") == ["python:3.11.7-slim-bookworm"]
    assert bases(ROOT / "tools" / "controlplane" / "coredns" / "Dockerfile") == []


def test_bases_skip_stages_and_scratch(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text(
        "FROM python:3.13-slim-trixie AS one\nRUN true\n"
        "from --platform=linux/amd64 one as two\nFROM scratch\nCOPY --from=two /a /a\n"
    )
    assert bases(df) == ["python:3.13-slim-trixie"]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("debian:bookworm", "python:<X.Y>-slim-<suite> only"),
        ("python:3.11-slim-trixie", "Debian trixie does not ship Python 3.11"),
        ("python:3.12-alpine", "python:<X.Y>-slim-<suite> only"),
    ],
)
def test_base_suite_refuses_what_debian_cannot_stand_in_for(name: str, error: str) -> None:
    with pytest.raises(ValidationError, match=error.replace("(", r"\(").replace(")", r"\)")):
        base_suite(name)


def _context(tmp_path: Path) -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    (ctx / "pkg" / "__pycache__").mkdir(parents=True)
    (ctx / ".git").mkdir()
    (ctx / "pkg" / "a.txt").write_text("a")
    (ctx / "pkg" / "__pycache__" / "a.pyc").write_text("x")
    (ctx / ".git" / "HEAD").write_text("ref")
    (ctx / "secret.txt").write_text("never copied")
    (ctx / ".dockerignore").write_text("# comment\n.git\n**/__pycache__\nsecret*\n")
    df = ctx / "Dockerfile"
    df.write_text('FROM scratch\nCOPY . /ctx\nUSER 65532:65532\nENTRYPOINT ["/x"]\n')
    return ctx, df


def test_fingerprint_follows_what_could_be_copied(tmp_path: Path) -> None:
    ctx, df = _context(tmp_path)
    first = fingerprint(df, ctx, [])
    (ctx / "pkg" / "__pycache__" / "a.pyc").write_text("changed")  # ignored literally
    (ctx / ".git" / "HEAD").write_text("other")
    assert fingerprint(df, ctx, []) == first
    # secret* is a pattern: the fingerprint does not interpret it, so it counts (safe side)
    (ctx / "secret.txt").write_text("changed too")
    second = fingerprint(df, ctx, [])
    assert second != first
    (ctx / "pkg" / "a.txt").write_text("b")
    assert fingerprint(df, ctx, []) != second
    assert fingerprint(df, ctx, ["sha256:other-base"]) != fingerprint(df, ctx, [])
    # a re-include makes every literal skip unsafe: nothing is skipped then
    third = fingerprint(df, ctx, [])
    (ctx / ".dockerignore").write_text(".git\n**/__pycache__\n!pkg/__pycache__/keep.pyc\n")
    before = fingerprint(df, ctx, [])
    (ctx / "pkg" / "__pycache__" / "a.pyc").write_text("again")
    assert fingerprint(df, ctx, []) != before != third


def _layer_files(image: image_cache.BuiltImage) -> dict[str, tarfile.TarInfo]:
    layout = Path(image.layout)
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / image.manifest_digest[7:]).read_text())
    out: dict[str, tarfile.TarInfo] = {}
    for layer in manifest["layers"]:
        with tarfile.open(blob / layer["digest"][7:]) as tar:
            out.update({m.name.removeprefix("./"): m for m in tar.getmembers()})
    return out


@needs_buildah
def test_buildah_builds_caches_and_rebuilds_a_changed_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HORUS_CACHE_DIR", str(tmp_path / "cache"))
    ctx, df = _context(tmp_path)
    ref = images.reference("unit-test", "1")
    image = images._build_one(df, ctx, ref, lambda _: None)
    files = _layer_files(image)
    assert "ctx/pkg/a.txt" in files
    # .dockerignore as docker build reads it: patterns, ** and literal names
    assert not any(n.startswith(("ctx/.git", "ctx/secret")) or "__pycache__" in n for n in files)
    config_digest = json.loads(
        (Path(image.layout) / "blobs" / "sha256" / image.manifest_digest[7:]).read_text()
    )["config"]["digest"]
    config = json.loads((Path(image.layout) / "blobs" / "sha256" / config_digest[7:]).read_text())[
        "config"
    ]
    assert config["User"] == "65532:65532" and config["Entrypoint"] == ["/x"]
    assert image_cache.load_descriptor(Path(image.descriptor)) == image

    # unchanged: the descriptor answers (same manifest, same image)
    assert images._build_one(df, ctx, ref, lambda _: None) == image
    # touched, same bytes: buildah's step cache gives the same image, nothing pushed again
    os.utime(ctx / "pkg" / "a.txt")
    again = images._build_one(df, ctx, ref, lambda _: None)
    assert (again.image_id, again.manifest_digest) == (image.image_id, image.manifest_digest)
    # changed bytes: a new image whose layer holds them
    (ctx / "pkg" / "a.txt").write_text("new bytes")
    changed = images._build_one(df, ctx, ref, lambda _: None)
    assert changed.manifest_digest != image.manifest_digest
    member = _layer_files(changed)["ctx/pkg/a.txt"]
    assert member.size == len("new bytes")
    # the layout keeps only blobs a named manifest uses
    image_prune.prune_layout()
    assert not (Path(image.layout) / "blobs" / "sha256" / image.manifest_digest[7:]).exists()
    assert (Path(changed.layout) / "blobs" / "sha256" / changed.manifest_digest[7:]).exists()


@needs_buildah
def test_storage_keeps_each_images_step_cache_and_drops_earlier_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Multi-stage, as the project's Dockerfiles: the first stage's steps are named by no image
    (``buildah rmi --prune`` would drop them) and must stay; an old source's steps must go."""
    monkeypatch.setenv("HORUS_CACHE_DIR", str(tmp_path / "cache"))
    ctx = tmp_path / "ms"
    ctx.mkdir()
    (ctx / "deps").write_text("dependencies\n")
    (ctx / "src").write_text("v1\n")
    df = ctx / "Dockerfile"
    df.write_text(
        "FROM scratch AS build\nCOPY deps /deps\nCOPY src /src\n\n"
        "FROM scratch\nCOPY --from=build /deps /opt/deps\nCOPY --from=build /src /opt/src\n"
    )
    ref = images.reference("unit-test-prune", "1")
    quiet = lambda _: None  # noqa: E731
    first = images._build_one(df, ctx, ref, quiet)
    assert image_prune.prune_storage(quiet) == []
    # two steps a stage (COPY, COPY), both stages: all this build's, nothing else there
    assert len(first.steps) == 4 and set(first.steps) == set(image_cache.storage_images())

    (ctx / "src").write_text("v2\n")
    second = images._build_one(df, ctx, ref, quiet)
    # a killed build's working container, holding an old step image: removed, and the image
    leftover = subprocess.run(
        image_cache.buildah("from", "--quiet", first.image_id), capture_output=True, text=True
    )
    assert leftover.returncode == 0, leftover.stderr
    stale = set(first.steps) - set(second.steps)
    assert stale and first.image_id in stale  # the old source's steps, the old image
    assert set(first.steps) & set(second.steps)  # the unchanged dependency steps were reused
    removed = image_prune.prune_storage(quiet)
    assert set(removed) == stale
    left = image_cache.storage_images()
    assert set(left) == set(second.steps)
    containers = subprocess.run(image_cache.buildah("containers", "--quiet"), capture_output=True)
    assert containers.stdout.strip() == b""
    # the kept cache still serves: the same sources again make no new image at all
    os.utime(ctx / "src")
    third = images._build_one(df, ctx, ref, quiet)
    assert third.image_id == second.image_id and set(image_cache.storage_images()) == set(left)

    # a descriptor that records no steps (written before they were): nothing is removed
    descriptor = Path(third.descriptor)
    raw = json.loads(descriptor.read_text())
    descriptor.write_text(json.dumps({**raw, "steps": []}))
    (ctx / "src").write_text("v3\n")
    other = images.reference("unit-test-prune-other", "1")
    images._build_one(df, ctx, other, quiet)
    assert image_prune.prune_storage(quiet) == []
