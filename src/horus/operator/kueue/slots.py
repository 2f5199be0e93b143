"""GPU slots: where each pod of an admitted Workload's pod set runs, and with what share.

The check answers ``Ready`` with one ``podSetUpdates`` entry per pod set whose annotations
carry the pod set's slots (``horus.io/gpu-slots``, a JSON list) and the Workload they belong
to (``horus.io/kueue-workload``). The slots are read back from the Workload's status only;
the copy that reaches the pods is never trusted. A slot is *filled* by the claim Horus made
for one pod in it (``horus.io/gang-slot`` on the claim, an annotation only the operator may
write on a claim).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.kueue.workload import CheckState

__all__ = ["Slot", "decode_slots", "encode_slots", "filled_slots", "slot_key", "slots_of"]


@dataclass(frozen=True)
class Slot:
    pod_set: str
    index: int
    node: str
    gpu_index: int
    gpu_uuid: str
    core_percent: int
    memory_mib: int


def slot_key(workload_uid: str, pod_set: str, index: int) -> str:
    """The value of ``horus.io/gang-slot`` on the claim that fills this slot."""
    return f"{workload_uid}/{pod_set}/{index}"


def encode_slots(slots: Iterable[Slot]) -> str:
    return json.dumps(
        [
            {
                "i": s.index,
                "node": s.node,
                "gpu": s.gpu_index,
                "uuid": s.gpu_uuid,
                "core": s.core_percent,
                "memoryMiB": s.memory_mib,
            }
            for s in slots
        ],
        separators=(",", ":"),
    )


def _int(raw: Mapping[str, Any], key: str, low: int, where: str) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValidationError(f"{where}: '{key}' must be a whole number >= {low}")
    return value


def decode_slots(text: str, pod_set: str) -> list[Slot]:
    """The slots of ``pod_set`` in ``text``; :class:`ValidationError` when malformed."""
    where = f"{c.ANNOTATION_GANG_SLOTS} of pod set {pod_set}"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"{where}: not JSON ({exc})") from None
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: must be a list")
    out = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise ValidationError(f"{where}: each slot must be an object")
        node, uuid = item.get("node"), item.get("uuid")
        if not isinstance(node, str) or not node or not isinstance(uuid, str) or not uuid:
            raise ValidationError(f"{where}: each slot needs 'node' and 'uuid'")
        out.append(
            Slot(
                pod_set,
                _int(item, "i", 0, where),
                node,
                _int(item, "gpu", 0, where),
                uuid,
                _int(item, "core", 1, where),
                _int(item, "memoryMiB", 1, where),
            )
        )
    if len({s.index for s in out}) != len(out):
        raise ValidationError(f"{where}: slot indexes repeat")
    return out


def slots_of(check: CheckState, workload_uid: str) -> dict[str, list[Slot]]:
    """The slots a Ready check of Horus' records, by pod set. Entries of another Workload's
    pointer (a copy of another status) are left out."""
    out: dict[str, list[Slot]] = {}
    for update in check.pod_set_updates:
        ann = update.get("annotations") or {}
        if not isinstance(ann, Mapping) or c.ANNOTATION_GANG_SLOTS not in ann:
            continue
        pointer = str(ann.get(c.ANNOTATION_KUEUE_WORKLOAD) or "")
        if pointer.rpartition("/")[2] != workload_uid:
            continue
        name = str(update.get("name") or "")
        out[name] = decode_slots(str(ann[c.ANNOTATION_GANG_SLOTS]), name)
    return out


def filled_slots(claims: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Slot key → the claim filling it, for claims Horus made for a gang pod (with the
    ``horus.io/converted-for-pod`` mark as well: both only the operator may write)."""
    out: dict[str, Mapping[str, Any]] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        ann = meta.get("annotations") or {}
        key = ann.get(c.ANNOTATION_GANG_SLOT)
        if key and ann.get(c.ANNOTATION_CONVERTED_FOR) and not meta.get("deletionTimestamp"):
            out[str(key)] = claim
    return out
