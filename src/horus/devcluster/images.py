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
descriptors record (:func:`_prune_storage`). ``horus dev cluster load-images``
streams it as an OCI archive into every real node's containerd (``ctr images import``),
skipping nodes that already hold that manifest.

The sandbox ("pause"), kube-scheduler and CoreDNS images are Dockerfiles whose build context
is the folder of control-plane binaries that ``tools/controlplane/build.sh`` builds
(``tools/controlplane/{pause,kube-scheduler,coredns}/Dockerfile``), tagged with the version of
the binary (the pause program: its content digest).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from horus import __version__
from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.binaries import ensure_binaries

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
CTR_NAMESPACE = "k8s.io"  # the CRI's containerd namespace

#: Debian suites that can stand in for python:<version>-slim-<suite>: their Python.
SUITES = {"bookworm": "3.11", "trixie": "3.13"}
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3")
#: What the slim images leave out too.
DPKG_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MIRROR = os.environ.get("HORUS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The host's CA bundle (Debian's path), bound read-only over the image's during RUN.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

Log = Callable[[str], None]


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


@dataclass(frozen=True)
class BuiltImage:
    """A built image as the import needs it; stored as JSON (its descriptor)."""

    ref: str
    manifest_digest: str
    image_id: str
    layout: str  # the OCI layout folder that holds its blobs
    descriptor: str = ""
    fingerprint: str = ""  # of its Dockerfile, bases and context (:func:`fingerprint`)
    #: buildah's image of every step of its last build, all stages (full IDs): its step cache,
    #: which :func:`_prune_storage` keeps. Empty in a descriptor written before they were kept.
    steps: tuple[str, ...] = ()


#: The registry name of locally built images (``--set images.registry=horus.local`` for the
#: chart). It resolves nowhere, so a missing image fails to pull instead of being fetched
#: from a public registry under the same name.
LOCAL_REGISTRY = "horus.local"


def reference(repository: str, tag: str = __version__) -> str:
    """The fully qualified name the kubelet will ask containerd for."""
    return f"{LOCAL_REGISTRY}/{repository}:{tag}"


def cache_dir() -> Path:
    root = os.environ.get("HORUS_CACHE_DIR") or str(Path.home() / ".cache" / "horus")
    return Path(root) / "images"


def _buildah(*args: str) -> list[str]:
    """buildah with this cache's own storage (overlay: one copy of each layer on disk)."""
    if shutil.which("buildah") is None:
        raise ClusterError(
            "building images needs buildah (Debian package buildah): run tools/dev/setup.sh "
            "or apt-get install -y buildah"
        )
    store = cache_dir() / "storage"
    return [
        *("buildah", "--root", str(store / "root"), "--runroot", str(store / "run")),
        *("--storage-driver", "overlay", *args),
    ]


def _run(argv: list[str], what: str, log: Log | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(
            f"{what} failed (exit {proc.returncode}): "
            + (proc.stdout + proc.stderr).strip()[-3000:]
        )
    return proc.stdout


def load_descriptor(path: Path) -> BuiltImage:
    try:
        raw = json.loads(path.read_text())
        image = BuiltImage(**{**raw, "steps": tuple(raw.get("steps", ()))})
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ClusterError(
            f"image descriptor {path} is unreadable ({exc}); rebuild with 'horus dev images build'"
        ) from None
    if not _blob(Path(image.layout), image.manifest_digest).is_file():
        raise ClusterError(
            f"{image.ref}: its manifest is gone from {image.layout}; rebuild with "
            "'horus dev images build'"
        )
    return image


# --- the base image --------------------------------------------------------------------------


def bases(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines name, other than its own stages and scratch
    (what buildah would pull: it must be in storage here)."""
    found: list[str] = []
    stages: set[str] = set()
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if m is None:
            continue
        if m.group(1) not in stages and m.group(1) != "scratch" and m.group(1) not in found:
            found.append(m.group(1))
        if m.group(2):
            stages.add(m.group(2))
    return found


def base_suite(name: str) -> str:
    """The Debian suite that stands in for ``python:<X.Y[.Z]>-slim-<suite>``."""
    m = re.fullmatch(r"(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", name)
    if m is None:
        raise ValidationError(
            f"FROM {name}: this machine pulls no images; the local build stands in Debian for "
            "python:<X.Y>-slim-<suite> only (and builds FROM scratch or an earlier stage)"
        )
    version, suite = m.group(1), m.group(2)
    if SUITES.get(suite) != version:
        known = ", ".join(f"{s} ({v})" for s, v in SUITES.items())
        raise ValidationError(
            f"FROM {name}: Debian {suite} does not ship Python {version} (known: {known})"
        )
    return suite


def _has_image(name: str) -> bool:
    proc = subprocess.run(
        _buildah("inspect", "--type", "image", name), capture_output=True, text=True
    )
    return proc.returncode == 0


def ensure_base(name: str, log: Log) -> None:
    """Commit the Debian stand-in for ``name`` into buildah's storage (first time only)."""
    if _has_image(name):
        return
    suite = base_suite(name)
    if shutil.which("mmdebstrap") is None:
        raise ClusterError(
            "building images needs mmdebstrap (Debian package mmdebstrap): run "
            "tools/dev/setup.sh or apt-get install -y mmdebstrap"
        )
    work = cache_dir() / "work"
    work.mkdir(parents=True, exist_ok=True)
    tar = work / f"{suite}-base.tar"
    log(f"images: Debian {suite} base for {name} (mmdebstrap; first time only, about 2 min)")
    argv = [
        *("mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet"),
        "--include=" + ",".join(BASE_PACKAGES),
        *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        '--aptopt=Acquire::Retries "3"',
        *(suite, str(tar), MIRROR),
    ]
    try:
        _run(argv, f"mmdebstrap {suite} (it needs the Debian mirror {MIRROR}, HORUS_DEBIAN_MIRROR)")
        container = _run(_buildah("from", "--quiet", "scratch"), "buildah from scratch").strip()
        try:
            _run(_buildah("add", "--quiet", container, str(tar), "/"), "buildah add")
            _run(
                _buildah(
                    *("config", "--env", f"PATH={DEFAULT_PATH}", "--env", "LANG=C.UTF-8"),
                    *("--cmd", "python3", container),
                ),
                "buildah config",
            )
            _run(_buildah("commit", "--quiet", container, name), f"buildah commit {name}")
        finally:
            subprocess.run(_buildah("rm", container), capture_output=True)
    finally:
        tar.unlink(missing_ok=True)


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
        _prune()
        _prune_storage(say)
    return out


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per cache: :func:`_prune_storage` tells the step images of other
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
        ids.append(_run(_buildah("images", "--quiet", "--no-trunc", base), "buildah images"))
    return ids


def _build_one(dockerfile: Path, context: Path, ref: str, log: Log) -> BuiltImage:
    folder = cache_dir()
    descriptor = folder / "descriptors" / (ref.rsplit("/", 1)[-1].replace(":", "-") + ".json")
    key = fingerprint(dockerfile, context, _base_ids(dockerfile, log))
    known = _read_descriptor(descriptor)
    if known is not None and known.fingerprint == key and known.steps and _has_image(ref):
        return known
    before = set(storage_images())
    (folder / "work").mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder / "work", suffix=".iid")
    os.close(fd)
    iidfile = Path(name)
    argv = _buildah(
        *("bud", "--layers", "--pull=never", "--isolation", "chroot"),
        *("--iidfile", str(iidfile), "--file", str(dockerfile), "--tag", ref),
    )
    if CA_BUNDLE.is_file():
        argv += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    shown = dockerfile.relative_to(context) if dockerfile.is_relative_to(context) else dockerfile
    log(f"images: buildah bud {shown} -> {ref}")
    try:
        printed = _run([*argv, str(context)], f"buildah bud {shown}")
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
    _run(
        _buildah("push", "--quiet", "--disable-compression", ref, f"oci:{layout}:{ref}"),
        f"buildah push {ref}",
    )
    digest = _manifest_digest(layout, ref)
    image = BuiltImage(ref, digest, image_id, str(layout), str(descriptor), key, recorded)
    descriptor.parent.mkdir(parents=True, exist_ok=True)
    descriptor.write_text(json.dumps(asdict(image), indent=2))
    return image


#: How ``buildah bud`` names a step it took from its cache.
_CACHED_STEP = re.compile(r"^--> Using cache ([0-9a-f]{64})$", re.MULTILINE)


def storage_images() -> dict[str, list[str]]:
    """Every image in buildah's storage (intermediate ones too): full ID -> its names."""
    listed = _run(
        _buildah(
            *("images", "--all", "--no-trunc", "--noheading"),
            *("--format", "{{.ID}} {{.Name}}:{{.Tag}}"),
        ),
        "buildah images",
    )
    out: dict[str, list[str]] = {}
    for line in listed.splitlines():
        ident, _, name = line.strip().partition(" ")
        names = out.setdefault(ident.removeprefix("sha256:"), [])
        if name.strip() and name.strip() != "<none>:<none>":
            names.append(name.strip())
    return out


def _prune_storage(log: Log) -> list[str]:
    """Remove from buildah's storage every image no build needs; returns their IDs.

    Kept: every named image (the bases, the built images) and every step image a descriptor
    records, i.e. the step cache of each image's last build in every stage, so an unchanged
    image stays seconds and a changed source rebuilds only from the step it touches. Gone:
    the steps of earlier builds (an old source's ``COPY`` and everything after it). Not
    ``buildah rmi --prune``: it counts a multi-stage build's first stage as dangling (no named
    image stands on it) and drops the cache of its dependency layer. When a descriptor of an
    image in storage records no steps (written before they were), nothing is removed: its
    cache cannot be told from leftovers until that image is built once more. Working
    containers left by a killed build go first (every build holds :func:`_build_lock`)."""
    present = storage_images()
    named = {ident for ident, names in present.items() if names}
    keep = set(named)
    for path in sorted((cache_dir() / "descriptors").glob("*.json")):
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if set(raw) - {f.name for f in fields(BuiltImage)}:
            path.unlink(missing_ok=True)  # the hand-written builder's, read by nothing now
            continue
        if not raw.get("steps") and raw.get("image_id") in named:
            log(f"images: buildah storage not pruned: {raw.get('ref')} has no recorded steps")
            return []
        keep.update(raw.get("steps") or ())
    # Working containers: every build of this cache holds the build lock, so one left now is
    # a killed build's (buildah bud removes its own); each holds a writable layer and its
    # image.
    subprocess.run(_buildah("rm", "--all"), capture_output=True)
    removed = []
    for ident in present:
        # in use by a working container (a build of another checkout's stale lock): kept
        if (
            ident not in keep
            and subprocess.run(_buildah("rmi", ident), capture_output=True).returncode == 0
        ):
            removed.append(ident)
    if removed:
        log(f"images: removed {len(removed)} image(s) of earlier builds from buildah's storage")
    return removed


def _read_descriptor(path: Path) -> BuiltImage | None:
    if not path.is_file():
        return None
    try:
        return load_descriptor(path)
    except ClusterError:
        return None


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _manifest_digest(layout: Path, ref: str) -> str:
    index = json.loads((layout / "index.json").read_text())
    for entry in index.get("manifests", []):
        if (entry.get("annotations") or {}).get("org.opencontainers.image.ref.name") == ref:
            return str(entry["digest"])
    raise ClusterError(f"buildah push wrote no manifest named {ref} into {layout}")


def _prune() -> None:
    """Drop what no named image of the OCI layout uses: a push under a name already there
    leaves the old manifest in the index without its name. Without this the layout only
    grows. buildah's own storage: :func:`_prune_storage`."""
    for legacy in ("layers", "stages", "bases", "wheels"):  # the hand-written builder's cache
        shutil.rmtree(cache_dir() / legacy, ignore_errors=True)
    layout = cache_dir() / "oci"
    if not (layout / "index.json").is_file():
        return
    index = json.loads((layout / "index.json").read_text())
    named = [
        e
        for e in index.get("manifests", [])
        if (e.get("annotations") or {}).get("org.opencontainers.image.ref.name")
        and _blob(layout, e["digest"]).is_file()
    ]
    keep: set[str] = set()
    for entry in named:
        keep.add(entry["digest"].removeprefix("sha256:"))
        manifest = json.loads(_blob(layout, entry["digest"]).read_text())
        keep.add(manifest["config"]["digest"].removeprefix("sha256:"))
        keep.update(d["digest"].removeprefix("sha256:") for d in manifest["layers"])
    tmp = layout / "index.json.tmp"
    tmp.write_text(json.dumps({**index, "manifests": named}))
    tmp.replace(layout / "index.json")
    for blob in (layout / "blobs" / "sha256").iterdir():
        if blob.name not in keep:
            blob.unlink(missing_ok=True)


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


# --- loading into a node ---------------------------------------------------------------------


def _ctr(socket: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["ctr", "--address", str(socket), "--namespace", CTR_NAMESPACE, *args],
        capture_output=True,
        **kw,
    )


def present(image: BuiltImage, socket: Path) -> bool:
    """Whether the node's containerd already holds ``image`` (same manifest digest)."""
    proc = _ctr(socket, "images", "ls", f"name=={image.ref}", timeout=60)
    return proc.returncode == 0 and image.manifest_digest.encode() in proc.stdout


def import_into(image: BuiltImage, socket: Path) -> bool:
    """Stream ``image`` as an OCI archive (its blobs from the layout, an index that names it)
    into the containerd at ``socket``; False when it was there already."""
    if present(image, socket):
        return False
    layout = Path(image.layout)
    manifest = _blob(layout, image.manifest_digest).read_bytes()
    body = json.loads(manifest)
    blobs = [body["config"]["digest"], *(d["digest"] for d in body["layers"])]
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    "mediaType": MEDIA_MANIFEST,
                    "digest": image.manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": image.ref,
                        "org.opencontainers.image.ref.name": image.ref.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    proc = subprocess.Popen(
        [
            *("ctr", "--address", str(socket), "--namespace", CTR_NAMESPACE),
            *("images", "import", "-"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdin is not None
    try:
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.GNU_FORMAT) as tar:
            _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            _add_bytes(tar, "index.json", index)
            _add_bytes(tar, f"blobs/sha256/{image.manifest_digest[7:]}", manifest)
            for digest in blobs:
                path = _blob(layout, digest)
                info = tarfile.TarInfo(f"blobs/sha256/{path.name}")
                info.size = path.stat().st_size
                info.mode = 0o644
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.wait() != 0:
        raise ClusterError(f"ctr images import of {image.ref} into {socket} failed: {out.strip()}")
    return True


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
