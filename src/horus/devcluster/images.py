"""Horus' container images for the local cluster's real nodes: which ones, built how, loaded how.

``horus dev images build`` builds the images of this checkout from their Dockerfiles (the one
definition of what each holds; :mod:`horus.devcluster.imagebuild` executes them without a
Docker engine) and records each as a *descriptor*: its reference, OCI config, manifest and
layer files. ``horus dev cluster load-images`` streams an OCI archive of each into every real
node's containerd (``ctr images import``), skipping nodes that already hold that manifest.

The sandbox ("pause") image is not a Dockerfile: its only file is ``/pause``, the static
``horus-pause`` program that ``tools/controlplane/build.sh`` builds with the kubelet. The
Horus scheduler's kube-scheduler image is a Dockerfile whose build context is the folder of
those binaries (``tools/controlplane/kube-scheduler/Dockerfile``), tagged with the Kubernetes
version of the binary, as ``registry.k8s.io/kube-scheduler`` is.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from horus import __version__
from horus.common.errors import ClusterError, ValidationError
from horus.devcluster import dockerfile
from horus.devcluster.binaries import ensure_binaries
from horus.devcluster.imagebuild import (
    Builder,
    StageResult,
    _sha,
    cache_dir,
    prune,
)
from horus.devcluster.layers import file_digest

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
CTR_NAMESPACE = "k8s.io"  # the CRI's containerd namespace


@dataclass(frozen=True)
class ImageDef:
    """One image of this repository: its Dockerfile (relative to the checkout) and name.
    ``binaries``: its build context is the control-plane binaries folder
    (:func:`horus.devcluster.binaries.ensure_binaries`), not the checkout, and its tag is
    their Kubernetes version."""

    dockerfile: str
    repository: str
    about: str
    binaries: bool = False


#: The images ``horus dev images build`` knows. The chart's defaults name the first two
#: (``images.operator``, ``images.node``); the workload image runs the DLJob examples; the
#: kube-scheduler image is the Horus scheduler's (``images.kubeScheduler``) on real nodes.
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
        binaries=True,
    ),
}
#: What is built when no names are given (the predictor image pulls torch: GBs).
DEFAULT_IMAGES = ("operator", "node", "workload")


@dataclass(frozen=True)
class BuiltImage:
    """A built image as the import needs it; stored as JSON (its descriptor)."""

    ref: str
    manifest_digest: str
    config: str  # the config JSON, verbatim
    layers: list[str]  # layer tar paths, base first
    descriptor: str = ""

    def manifest(self) -> bytes:
        return _manifest(self.config.encode(), [Path(p) for p in self.layers])


#: The registry name of locally built images (``--set images.registry=horus.local`` for the
#: chart). It resolves nowhere, so a missing image fails to pull instead of being fetched
#: from a public registry under the same name.
LOCAL_REGISTRY = "horus.local"


def reference(repository: str, tag: str = __version__) -> str:
    """The fully qualified name the kubelet will ask containerd for."""
    return f"{LOCAL_REGISTRY}/{repository}:{tag}"


def _layer_digest(path: Path) -> str:
    name = path.name.removesuffix(".tar")
    return name if len(name) == 64 else file_digest(path)


def _manifest(config: bytes, layers: list[Path]) -> bytes:
    body = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {
            "mediaType": MEDIA_CONFIG,
            "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": MEDIA_LAYER,
                "digest": "sha256:" + _layer_digest(p),
                "size": p.stat().st_size,
            }
            for p in layers
        ],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _config(result: StageResult, layers: list[Path]) -> bytes:
    cfg: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in result.env.items()]}
    if result.entrypoint:
        cfg["Entrypoint"] = result.entrypoint
    if result.cmd:
        cfg["Cmd"] = result.cmd
    if result.user:
        cfg["User"] = result.user
    if result.workdir:
        cfg["WorkingDir"] = result.workdir
    if result.labels:
        cfg["Labels"] = result.labels
    if result.exposed:
        cfg["ExposedPorts"] = {p: {} for p in result.exposed}
    body = {
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + _layer_digest(p) for p in layers]},
        "history": [{"created_by": h} for h in result.history],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _save(ref: str, key: str, config: bytes, layers: list[Path]) -> BuiltImage:
    folder = cache_dir() / "descriptors"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(config, layers)
    name = ref.rsplit("/", 1)[-1].replace(":", "-")
    path = folder / f"{name}-{key[:16]}.json"
    image = BuiltImage(
        ref=ref,
        manifest_digest="sha256:" + hashlib.sha256(manifest).hexdigest(),
        config=config.decode(),
        layers=[str(p) for p in layers],
        descriptor=str(path),
    )
    path.write_text(json.dumps(asdict(image), indent=2))
    return image


def load_descriptor(path: Path) -> BuiltImage:
    try:
        raw = json.loads(path.read_text())
        image = BuiltImage(**raw)
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterError(
            f"image descriptor {path} is unreadable ({exc}); rebuild with 'horus dev images build'"
        ) from None
    missing = [p for p in image.layers if not Path(p).is_file()]
    if missing:
        raise ClusterError(
            f"{image.ref}: layer {missing[0]} is gone from the cache; rebuild with "
            "'horus dev images build'"
        )
    return image


# --- building --------------------------------------------------------------------------------


def build(
    root: Path,
    names: list[str],
    log: Callable[[str], None] | None = None,
    bin_dir: Path | None = None,
) -> list[BuiltImage]:
    """Build (or find in the cache) the named images of the checkout at ``root``; images
    built from the control-plane binaries take them from ``bin_dir`` (default: where
    ``tools/controlplane/build.sh`` puts them, building them the first time)."""
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ValidationError(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    builders: dict[Path, Builder] = {}
    out = []
    for name in names:
        spec = IMAGES[name]
        tag = __version__
        context = root
        if spec.binaries:
            context = bin_dir or ensure_binaries()
            tag = kubernetes_version(context)
        builder = builders.get(context) or builders.setdefault(context, Builder(context, log=log))
        df = dockerfile.parse(root / spec.dockerfile)
        key = builder.stage_key(df, df.stages[-1])
        # The final stage's key covers every instruction, so metadata changes rebuild too.
        ref = reference(spec.repository, tag)
        found = _cached(ref, key)
        if found is not None:
            out.append(found)
            continue
        result = builder.build(df)
        layers = [builder.layers / f"{d}.tar" for d in result.layers]
        out.append(_save(ref, key, _config(result, layers), layers))
    _prune(out, set().union(*(b.stages_used() for b in builders.values())))
    return out


def kubernetes_version(bin_dir: Path) -> str:
    """The Kubernetes version of the binaries in ``bin_dir`` (``v1.34.4``), as
    ``kube-scheduler --version`` prints it."""
    binary = bin_dir / "kube-scheduler"
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(
            f"cannot run {binary} --version ({exc}); rebuild with tools/controlplane/build.sh"
        ) from None
    words = out.split()
    if len(words) != 2 or words[0] != "Kubernetes" or not words[1].startswith("v"):
        raise ClusterError(f"{binary} --version printed {out.strip()!r}, not 'Kubernetes vX.Y.Z'")
    return words[1]


def _prune(built: list[BuiltImage], stages: set[str]) -> None:
    """Keep the newest descriptor of each image (and the ones just built), their layers and
    the stages this build used; drop the rest of the cache."""
    folder = cache_dir() / "descriptors"
    newest: dict[str, Path] = {}
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            ref = json.loads(path.read_text())["ref"]
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)
            continue
        newest[ref] = path
    for image in built:
        newest[image.ref] = Path(image.descriptor)
    keep = set(newest.values())
    layers: set[str] = set()
    for path in folder.glob("*.json"):
        if path not in keep:
            path.unlink(missing_ok=True)
            continue
        layers.update(
            Path(p).name.removesuffix(".tar") for p in json.loads(path.read_text())["layers"]
        )
    for key in stages:
        record = cache_dir() / "stages" / f"{key}.json"
        if record.is_file():
            layers.update(json.loads(record.read_text()).get("layers", []))
    prune(layers, stages)


def _cached(ref: str, key: str) -> BuiltImage | None:
    name = ref.rsplit("/", 1)[-1].replace(":", "-")
    path = cache_dir() / "descriptors" / f"{name}-{key[:16]}.json"
    if not path.is_file():
        return None
    try:
        found = load_descriptor(path)
    except ClusterError:
        return None
    return found if found.ref == ref else None


def pause_image(bin_dir: Path) -> BuiltImage:
    """The sandbox image: ``/pause`` from ``bin_dir/horus-pause``, tagged by its content."""
    binary = bin_dir / "horus-pause"
    if not binary.is_file():
        raise ClusterError(
            f"{bin_dir} has no horus-pause: run tools/controlplane/build.sh (it builds the "
            "pod sandbox program with the kubelet), then retry"
        )
    digest = file_digest(binary)
    ref = reference("horus-pause", digest[:12])
    found = _cached(ref, _sha("pause", digest))
    if found is not None:
        return found
    layers_dir = cache_dir() / "layers"
    layers_dir.mkdir(parents=True, exist_ok=True)
    tmp = layers_dir / f"pause-{digest}.tmp"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        info = tar.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755
        info.mtime = 0
        with binary.open("rb") as fh:
            tar.addfile(info, fh)
    layer = layers_dir / f"{file_digest(tmp)}.tar"
    tmp.replace(layer)
    result = StageResult(layers=[], env={"PATH": "/"}, entrypoint=["/pause"], user="65535:65535")
    result.history.append("horus-pause from tools/controlplane/cmd/horus-pause")
    return _save(ref, _sha("pause", digest), _config(result, [layer]), [layer])


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
    """Stream ``image`` as an OCI archive into the containerd at ``socket``; False when it
    was there already."""
    if present(image, socket):
        return False
    config = image.config.encode()
    manifest = image.manifest()
    tag = image.ref.rsplit(":", 1)[1]
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
                        "org.opencontainers.image.ref.name": tag,
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
            _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(config).hexdigest()}", config)
            for layer in map(Path, image.layers):
                info = tarfile.TarInfo(f"blobs/sha256/{_layer_digest(layer)}")
                info.size = layer.stat().st_size
                info.mode = 0o644
                with layer.open("rb") as fh:
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
