"""Where the control-plane binaries come from: built once by ``tools/controlplane/build.sh``.

``HORUS_BIN_DIR`` points at a folder of ready binaries and skips the build (for machines that
already have them). etcd is Debian's ``etcd-server`` package (``/usr/bin/etcd``); see
``docs/decisions.md`` for why the Debian build is enough for the pinned apiserver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from horus.common.errors import ClusterError

K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
TOOL_BINARIES = ("kwok", "helm")


def repo_root() -> Path:
    """The checkout that holds ``tools/controlplane`` (``HORUS_REPO`` overrides the search)."""
    env = os.environ.get("HORUS_REPO")
    candidates = [Path(env)] if env else []
    candidates += list(Path(__file__).resolve().parents) + list(Path.cwd().resolve().parents)
    candidates.insert(1 if env else 0, Path.cwd().resolve())
    for c in candidates:
        if (c / "tools" / "controlplane" / "build.sh").is_file():
            return c
    raise ClusterError(
        "cannot find tools/controlplane/build.sh: run horus from a Horus checkout or set "
        "HORUS_REPO to one (the local cluster is a development tool)"
    )


def ensure_binaries() -> Path:
    """Build (first time only) and return the folder with the Kubernetes, kwok and helm binaries."""
    given = os.environ.get("HORUS_BIN_DIR")
    if given:
        folder = Path(given)
    else:
        script = repo_root() / "tools" / "controlplane" / "build.sh"
        proc = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise ClusterError(
                f"building the control-plane binaries failed (exit {proc.returncode}); the "
                "message above names the step that failed and how to fix it"
            )
        folder = Path(proc.stdout.strip().splitlines()[-1])
    missing = [b for b in K8S_BINARIES + TOOL_BINARIES if not (folder / b).is_file()]
    if missing:
        raise ClusterError(
            f"{folder} lacks {', '.join(missing)}; unset HORUS_BIN_DIR to build them"
        )
    return folder


def etcd_binary() -> Path:
    """Debian's etcd (``HORUS_ETCD`` overrides)."""
    found = os.environ.get("HORUS_ETCD") or shutil.which("etcd") or "/usr/bin/etcd"
    path = Path(found)
    if not path.is_file():
        raise ClusterError(
            "etcd not found: install Debian's etcd-server package (apt-get install -y "
            "etcd-server) or set HORUS_ETCD to an etcd binary"
        )
    return path
