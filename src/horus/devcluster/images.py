"""Horus' container images for the local cluster's real nodes: which ones, built how, loaded how.

``horus dev images build`` builds the images of this checkout from their Dockerfiles with
**buildah** (Debian's ``buildah`` package; no daemon, no Docker engine): ``buildah bud
--layers --pull=never --isolation chroot`` with its own storage in
``${HORUS_CACHE_DIR:-~/.cache/horus}/images``. buildah executes the Dockerfiles as ``docker
build`` does — ``.dockerignore``, multi-stage ``COPY --from``, ``RUN`` in a chroot — and
``--layers`` caches every step by its parent, its instruction and the content it copies, so an
unchanged image costs seconds and a changed source rebuilds from the first step it touches.

What buildah cannot do here is pull: this machine reaches no container registry. The one base
the Dockerfiles name, ``python:<X.Y[.Z]>-slim-<suite>``, is therefore committed into buildah's
storage under that very name from a Debian root that ``mmdebstrap --variant=minbase`` makes
with ``python3`` (documentation, man pages and locales left out, as in the slim images); the
suite must ship the tag's Python (bookworm 3.11, trixie 3.13), else the build stops and says
so. ``RUN`` reaches the network as in ``docker build``; this host's CA bundle is bound over the
image's, read-only and for the step only, so ``pip`` trusts what this host trusts (a proxy's
CA, say) without the image keeping it.

Each built image is pushed, uncompressed, into one OCI layout folder (``images/oci``; layers
shared between images are stored once, and a push of an unchanged image copies nothing) and
recorded as a *descriptor* (reference, manifest digest, the step images of its build).
After each build, buildah's storage keeps only named images and the step cache the
descriptors record (:func:`horus.devcluster.image_prune.prune_storage`). ``horus dev cluster load-images``
streams it as an OCI archive into every real node's containerd (``ctr images import``),
skipping nodes that already hold that manifest.

The sandbox ("pause"), kube-scheduler and CoreDNS images are Dockerfiles whose build context
is the folder of control-plane binaries that ``tools/controlplane/build.sh`` builds
(``tools/controlplane/{pause,kube-scheduler,coredns}/Dockerfile``), tagged with the version of
the binary (the pause program: its content digest).

This module holds the catalogue and the build; the cache and its descriptors are
:mod:`horus.devcluster.image_cache`, the Debian stand-in :mod:`horus.devcluster.image_base`,
pruning :mod:`horus.devcluster.image_prune`, loading into a node
:mod:`horus.devcluster.image_load`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from horus import __version__
from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.binaries import ensure_binaries
from horus.devcluster.image_base import bases, ensure_base
from horus.devcluster.image_cache import (
    BuiltImage,
    Log,
    buildah,
    cache_dir,
    has_image,
    manifest_digest,
    read_descriptor,
    run,
    storage_images,
)
from horus.devcluster.image_prune import prune_layout, prune_storage

#: The host's CA bundle (Debian's path), bound read-only over the image's during RUN.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class ImageDef:
    """One image of this repository: its Dockerfile (relative to the checkout) and name.
    ``binary``: its build context is the control-plane binaries folder
    (:func:`horus.devcluster.binaries.ensure_binaries`), not the checkout, and its tag is
    that binary's version (:func:`binary_tag`)."""

    dockerfile: str
    repository: str
    about: str
    binary: str = ""


#: The images ``horus dev images build`` knows. The chart's defaults name the first two
#: (``images.operator``, ``images.node``); the workload image runs the DLJob examples; the
#: kube-scheduler image is the Horus scheduler's (``images.kubeScheduler``) on real nodes;
#: the pause and CoreDNS images are every real node's pod sandbox and the cluster's DNS.
IMAGES: dict[str, ImageDef] = {
    "operator": ImageDef("operator/Dockerfile", "horus-operator", "operator + extender"),
    "node": ImageDef("device-plugin/Dockerfile", "horus-device-plugin", "device plugin + agent"),
    "workload": ImageDef(
        "examples/workload/Dockerfile", "horus-workload", "example training loop for DLJobs"
    ),
    "predictor": ImageDef("predictor/Dockerfile", "horus-predictor", "predictor CLI (torch)"),
    "kube-scheduler": ImageDef(
        "tools/controlplane/kube-scheduler/Dockerfile",
        "kube-scheduler",
        "the Horus scheduler's kube-scheduler (pinned Kubernetes build)",
        binary="kube-scheduler",
    ),
    "pause": ImageDef(
        "tools/controlplane/pause/Dockerfile",
        "horus-pause",
        "the real nodes' pod sandbox (tools/controlplane/cmd/horus-pause)",
        binary="horus-pause",
    ),
    "coredns": ImageDef(
        "tools/controlplane/coredns/Dockerfile",
        "coredns",
        "the cluster's DNS (pinned CoreDNS build)",
        binary="coredns",
    ),
}
#: What is built when no names are given (the predictor image pulls torch: GBs).
DEFAULT_IMAGES = ("operator", "node", "workload")


#: The registry name of locally built images (``--set images.registry=horus.local`` for the
#: chart). It resolves nowhere, so a missing image fails to pull instead of being fetched
#: from a public registry under the same name.
LOCAL_REGISTRY = "horus.local"


def reference(repository: str, tag: str = __version__) -> str:
    """The fully qualified name the kubelet will ask containerd for."""
    return f"{LOCAL_REGISTRY}/{repository}:{tag}"


# --- building --------------------------------------------------------------------------------


def build(
    root: Path,
    names: list[str],
    log: Log | None = None,
    bin_dir: Path | None = None,
) -> list[BuiltImage]:
    """Build (or find in buildah's cache) the named images of the checkout at ``root``;
    images built from the control-plane binaries take them from ``bin_dir`` (default: where
    ``tools/controlplane/build.sh`` puts them, building them the first time)."""
    say: Log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ValidationError(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    out = []
    with _build_lock():
        for name in names:
            spec = IMAGES[name]
            tag, context = __version__, root
            if spec.binary:
                context = bin_dir or ensure_binaries()
                tag = binary_tag(context, spec.binary)
            out.append(
                _build_one(root / spec.dockerfile, context, reference(spec.repository, tag), say)
            )
        prune_layout()
        prune_storage(say)
    return out


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per cache: :func:`prune_storage` tells the step images of other
    builds from leftovers by what the descriptors record, and a build running beside it has
    not recorded its own yet."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "build.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fingerprint(dockerfile: Path, context: Path, base_ids: list[str]) -> str:
    """What the image is made of as far as this host can see it cheaply: the Dockerfile's
    bytes, its bases' image IDs, and every path of the context with its size, mtime, mode and
    inode. Only paths that ``.dockerignore`` leaves out by a literal name (``.git``,
    ``**/__pycache__``) are skipped, so the fingerprint changes whenever anything buildah
    could copy changes; then buildah decides what to rebuild. It spares an unchanged image
    buildah's check of ``COPY --from``, which hashes the whole copied tree (~10 s for the
    operator's virtualenv)."""
    top, anywhere = _literal_ignores(context)
    h = hashlib.sha256(dockerfile.read_bytes())
    h.update("\0".join(base_ids).encode())
    for dirpath, dirnames, filenames in os.walk(context):
        rel = os.path.relpath(dirpath, context)
        dirnames[:] = sorted(
            d for d in dirnames if d not in anywhere and not (rel == "." and d in top)
        )
        for name in sorted(filenames):
            if name in anywhere or (rel == "." and name in top):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            h.update(
                f"{rel}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\0{st.st_ino}\n".encode()
            )
    return h.hexdigest()


def _literal_ignores(context: Path) -> tuple[set[str], set[str]]:
    """(top-level names, names at any depth) that ``.dockerignore`` excludes literally; none
    when it re-includes anything (``!``), as the fingerprint then cannot tell."""
    path = context / ".dockerignore"
    if not path.is_file():
        return set(), set()
    lines = [ln.strip() for ln in path.read_text().splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if any(ln.startswith("!") for ln in lines):
        return set(), set()
    plain = re.compile(r"[^*?\[\]/\\]+")
    top = {ln.strip("/") for ln in lines if plain.fullmatch(ln.strip("/"))}
    anywhere = {ln[3:] for ln in lines if ln.startswith("**/") and plain.fullmatch(ln[3:])}
    return top, anywhere


def _base_ids(dockerfile: Path, log: Log) -> list[str]:
    ids = []
    for base in bases(dockerfile):
        ensure_base(base, log)
        ids.append(run(buildah("images", "--quiet", "--no-trunc", base), "buildah images"))
    return ids


def _build_one(dockerfile: Path, context: Path, ref: str, log: Log) -> BuiltImage:
    folder = cache_dir()
    descriptor = folder / "descriptors" / (ref.rsplit("/", 1)[-1].replace(":", "-") + ".json")
    key = fingerprint(dockerfile, context, _base_ids(dockerfile, log))
    known = read_descriptor(descriptor)
    if known is not None and known.fingerprint == key and known.steps and has_image(ref):
        return known
    before = set(storage_images())
    (folder / "work").mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder / "work", suffix=".iid")
    os.close(fd)
    iidfile = Path(name)
    argv = buildah(
        *("bud", "--layers", "--pull=never", "--isolation", "chroot"),
        *("--iidfile", str(iidfile), "--file", str(dockerfile), "--tag", ref),
    )
    if CA_BUNDLE.is_file():
        argv += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    shown = dockerfile.relative_to(context) if dockerfile.is_relative_to(context) else dockerfile
    log(f"images: buildah bud {shown} -> {ref}")
    try:
        printed = run([*argv, str(context)], f"buildah bud {shown}")
        image_id = iidfile.read_text().strip().removeprefix("sha256:")
    finally:
        iidfile.unlink(missing_ok=True)
    # Its steps: those buildah took from its cache (it names them) and those it made (it does
    # not name them: the images that are new since the build began, under the build lock).
    steps = (set(storage_images()) - before) | set(_CACHED_STEP.findall(printed)) | {image_id}
    recorded = tuple(sorted(steps))
    if known is not None and known.image_id == image_id:
        image = BuiltImage(
            ref, known.manifest_digest, image_id, known.layout, str(descriptor), key, recorded
        )
        descriptor.write_text(json.dumps(asdict(image), indent=2))
        return image  # buildah found every step cached: pushed before, nothing to copy
    layout = folder / "oci"
    run(
        buildah("push", "--quiet", "--disable-compression", ref, f"oci:{layout}:{ref}"),
        f"buildah push {ref}",
    )
    digest = manifest_digest(layout, ref)
    image = BuiltImage(ref, digest, image_id, str(layout), str(descriptor), key, recorded)
    descriptor.parent.mkdir(parents=True, exist_ok=True)
    descriptor.write_text(json.dumps(asdict(image), indent=2))
    return image


#: How ``buildah bud`` names a step it took from its cache.
_CACHED_STEP = re.compile(r"^--> Using cache ([0-9a-f]{64})$", re.MULTILINE)


def binary_tag(bin_dir: Path, binary: str) -> str:
    """The tag of an image made of one control-plane binary: the Kubernetes version for
    kube-scheduler, the CoreDNS version, the first 12 hex digits of the pause program."""
    if binary == "kube-scheduler":
        return kubernetes_version(bin_dir)
    if binary == "coredns":
        return coredns_version(bin_dir)
    path = bin_dir / binary
    if not path.is_file():
        raise ClusterError(
            f"{bin_dir} has no {binary}: run tools/controlplane/build.sh (it builds the pod "
            "sandbox program with the kubelet), then retry"
        )
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _version_output(binary: Path, flag: str) -> str:
    try:
        return subprocess.run(
            [str(binary), flag], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(
            f"cannot run {binary} {flag} ({exc}); rebuild with tools/controlplane/build.sh"
        ) from None


def kubernetes_version(bin_dir: Path) -> str:
    """The Kubernetes version of the binaries in ``bin_dir`` (``v1.34.4``), as
    ``kube-scheduler --version`` prints it."""
    binary = bin_dir / "kube-scheduler"
    out = _version_output(binary, "--version")
    words = out.split()
    if len(words) != 2 or words[0] != "Kubernetes" or not words[1].startswith("v"):
        raise ClusterError(f"{binary} --version printed {out.strip()!r}, not 'Kubernetes vX.Y.Z'")
    return words[1]


def coredns_version(bin_dir: Path) -> str:
    """CoreDNS' version (``v1.15.0``) from the first line ``coredns -version`` prints
    (``CoreDNS-1.15.0``)."""
    binary = bin_dir / "coredns"
    out = _version_output(binary, "-version")
    m = re.match(r"CoreDNS-(\d+\.\d+\.\d+)\s", out)
    if m is None:
        raise ClusterError(f"{binary} -version printed {out.strip()[:80]!r}, not 'CoreDNS-X.Y.Z'")
    return "v" + m.group(1)


def pause_image(bin_dir: Path) -> BuiltImage:
    """The sandbox image: ``/pause`` from ``bin_dir/horus-pause``, tagged by its content."""
    from horus.devcluster.binaries import repo_root

    (image,) = build(repo_root(), ["pause"], bin_dir=bin_dir)
    return image
