"""CDI specs: how a prepared claim reaches its containers.

The kubelet passes the CDI device IDs Prepare returned to the container runtime, which looks
each up in the CDI specs of its spec directories (containerd: ``cdi_spec_dirs``, by default
``/etc/cdi`` and ``/var/run/cdi``) and applies its ``containerEdits`` to the container. So
the driver writes one spec per claim, kind ``horus.io/gpu``, with one device named after the
claim's UID, whose edits are exactly what the device plugin's ``Allocate`` hands over for the
same share (:func:`horus.node.grant.build_grant`): environment, mounts, device nodes.

The file is written atomically (a temporary file in the same directory, fsync, rename) under a
name the CDI cache ignores until the rename (it reads only ``*.json``/``*.yaml``), so the
runtime never reads half a spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.node.grant import ContainerGrant

#: CDI spec version: env, mounts and device nodes need 0.3.0; 0.6.0 is read by every
#: containerd with CDI (1.7+, 2.x) and by CRI-O.
CDI_VERSION = "0.6.0"


def cdi_device_id(claim_uid: str) -> str:
    """The fully qualified CDI device name of a claim's share (``horus.io/gpu=<uid>``)."""
    return f"{c.DRA_CDI_KIND}={claim_uid}"


def spec_file_name(claim_uid: str) -> str:
    """``horus.io-gpu_<uid>.json``: vendor-class_id, as CDI's transient spec names are."""
    vendor, cls = c.DRA_CDI_KIND.split("/")
    return f"{vendor}-{cls}_{claim_uid}.json"


def build_spec(claim_uid: str, grant: ContainerGrant) -> dict[str, Any]:
    """The CDI spec of one claim's share (pure)."""
    edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in sorted(grant.envs.items())]}
    if grant.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["rbind", "ro" if m.read_only else "rw"],
            }
            for m in grant.mounts
        ]
    if grant.devices:
        edits["deviceNodes"] = [
            {"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}
            for d in grant.devices
        ]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": c.DRA_CDI_KIND,
        "devices": [{"name": claim_uid, "containerEdits": edits}],
    }


def write_spec(cdi_dir: Path, claim_uid: str, spec: dict[str, Any]) -> Path:
    """Write ``spec`` as the claim's spec file, atomically; returns its path."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = cdi_dir / spec_file_name(claim_uid)
    atomic_write(path, json.dumps(spec, indent=1, sort_keys=True) + "\n")
    return path


def remove_spec(cdi_dir: Path, claim_uid: str) -> None:
    (cdi_dir / spec_file_name(claim_uid)).unlink(missing_ok=True)


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old file or the new one, whole."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # the runtime reads it; nothing secret is in it
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # the rename itself survives a crash only once the directory is synced
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
