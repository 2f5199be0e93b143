"""Loading a built image into a real node: streamed from the cache's OCI layout as an OCI
archive into the node's containerd (``ctr images import``), skipped when the node already holds
that manifest."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from horus.common.errors import ClusterError
from horus.devcluster.image_cache import BuiltImage, blob

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
CTR_NAMESPACE = "k8s.io"  # the CRI's containerd namespace


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
    manifest = blob(layout, image.manifest_digest).read_bytes()
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
                path = blob(layout, digest)
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
