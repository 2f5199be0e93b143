"""The workload a Horus-placed pod belongs to, as people read it in metrics and dashboards.

Horus places pods of any owner: DLJob replicas, pods of Kueue Workloads, gangs of plain pods,
and plain pods of a Job, a Deployment's ReplicaSet or a JobSet. The agent measures each pod on
its own; :func:`workload_identity` names what the pod is part of, so its measurements can be
read per workload (``horus_pod_pair_speed_ratio{workload=...}``).

A label for display only: every field it comes from (the pod's labels, annotations and owner
references) is written by the tenant or the tenant's controllers, so nothing decides on it —
not a share, not an eviction, not which DLJob's status is written. Values that are not a
plausible Kubernetes name are passed over (the next rule applies), so a hostile field can
neither blow up a label's size nor put odd characters into one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from horus.common import constants as c

#: A name as the apiserver allows it for the objects named here (DNS subdomain or label value),
#: at most 253 characters.
_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?$")
#: A Kubernetes kind: a letter, then letters and digits, at most 63 characters.
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
#: Owner references looked at, at most (a pod has one controller, and few owners).
MAX_OWNER_REFERENCES = 32


def _name(value: object) -> str | None:
    """``value`` when it is a plausible object name, else None."""
    return value if isinstance(value, str) and _NAME.match(value) else None


def _controller(meta: Mapping[str, Any]) -> str | None:
    """``<kind>/<name>`` of the pod's controller owner reference, or None."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs[:MAX_OWNER_REFERENCES]:
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        kind, name = ref.get("kind"), _name(ref.get("name"))
        if isinstance(kind, str) and _KIND.match(kind) and name is not None:
            return f"{kind}/{name}"
        return None  # one controller at most: a malformed one is not replaced by another owner
    return None


def workload_identity(meta: Mapping[str, Any], job: str | None = None) -> str:
    """The workload of a pod with metadata ``meta`` (the pod object's ``metadata``), for
    display only (the module docstring says why nothing decides on it):

    * ``job``, the DLJob the pod is a replica of, when given;
    * the Workload's name of a pod Kueue started (``horus.io/kueue-workload:
      <workload name>/<uid>``);
    * ``gang/<name>`` for a pod of a gang of plain pods (label ``horus.io/gang-name``);
    * ``<kind>/<name>`` of the pod's controller owner (``ReplicaSet/web-7d9f``, ``Job/train``);
    * else ``Pod/<name>``.
    """
    dljob = _name(job)
    if dljob is not None:
        return dljob
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    pointer = annotations.get(c.ANNOTATION_KUEUE_WORKLOAD)
    if isinstance(pointer, str):
        workload = _name(pointer.partition("/")[0])
        if workload is not None:
            return workload
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    gang = _name(labels.get(c.LABEL_GANG_NAME))
    if gang is not None:
        return f"gang/{gang}"
    owner = _controller(meta)
    if owner is not None:
        return owner
    return f"Pod/{_name(meta.get('name')) or '?'}"
