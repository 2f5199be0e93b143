"""The extender's bind verb: the pod's assignment to the named node, signed, written and
re-checked before the Binding.

Every check that needs only the pod comes first, then the pod's own constraints and the
Allocate order on the node, then the core's answer for that node alone from the live state
(the same as filter's). The assignment is signed for this pod's UID and written with a
``resourceVersion`` precondition; with ``verify_binds`` a fresh read makes sure this share is
the one counted (another placer may have chosen the same GPU at the same moment), and a lost
race or a failed Binding rolls the assignment back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from horus.api.assignment import GpuAssignment, encode_assignment, encode_predicted
from horus.api.nodematch import constraints_of
from horus.api.podassignment import controller_dljob_uid
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.kube.errors import Conflict
from horus.operator.allocate_order import BindGate
from horus.operator.extender.demand import PodDemand, pod_demand
from horus.operator.extender.settings import NO_INVENTORY
from horus.operator.extender.source import ClusterSource
from horus.operator.extender.wire import BindingArgs
from horus.operator.livestate import LiveObjects
from horus.scheduler import Refusal

if TYPE_CHECKING:
    from horus.operator.extender.decisions import Extender

log = logging.getLogger(__name__)


def bind_pod(ext: Extender, args: BindingArgs, where: str) -> None:
    """Sign the pod's assignment to ``args.node`` onto it, make sure it is the share counted,
    then bind it (the caller holds the extender's bind lock)."""
    ns, name, node = args.pod_namespace, args.pod_name, args.node
    found = _bindable_pod(ext.source, args, where)
    if found is None:
        return  # already bound there: a retried call after a lost response
    pod, demand = found
    assert demand.request is not None  # _bindable_pod refuses a pod without one
    meta = pod.get("metadata") or {}
    objs = ext.source.list_objects()
    _check_target(pod, node, where, objs)
    live, units = ext._live(demand.request.name, objs)
    job = ext._in_mib(demand.request, units.get(node, 1))
    st = live.state
    if node not in st.node_names or node in live.excluded_nodes:
        why = live.excluded_nodes.get(node) or NO_INVENTORY
        raise ValidationError(f"node {node} cannot take it: {why}")
    result = ext._decide(live, job, [node])[node]
    if isinstance(result, Refusal):
        raise ValidationError(f"node {node} cannot take it any more: {result.reason}")
    share = result.replicas[0].gpus[0]
    assignment = GpuAssignment(
        node=node,
        gpu_uuid=share.gpu_uuid,
        gpu_index=share.gpu_index,
        core_percent=share.core_percent,
        memory_mib=share.memory_mib,
    )
    text = encode_assignment(assignment)
    gpu_model = st.gpu_model[st.gpu_id(share.node, share.gpu_index)]
    predicted = ext.session.predicted_usage(result.prediction, gpu_model)
    annotations = {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        # Bound to this pod's UID (a pod re-created with copied annotations does not
        # verify); a plain pod has no DLJob (its UID is "") and no record epoch (0).
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: ext.keys().sign_assignment(
            ns,
            name,
            str(meta.get("uid") or args.pod_uid or ""),
            controller_dljob_uid(meta),
            0,
            text,
        ),
        c.ANNOTATION_PREDICTED: encode_predicted(predicted),
    }
    try:
        ext.source.patch_pod_annotations(ns, name, annotations, meta.get("resourceVersion"))
    except Conflict:
        raise ValidationError(f"{where} changed while binding; the scheduler retries") from None
    # Written. Another placer (the operator, a second extender) may have chosen the same
    # GPU at the same moment: re-read and make sure our share is the one counted.
    if ext.verify_binds:
        check = ext._build(ext.source.fresh_objects())
        if job.name not in check.residents:
            _rollback(ext.source, ns, name)
            raise ValidationError(
                f"GPU {node}/gpu-{share.gpu_index} was taken by another placement at the "
                "same time; the scheduler retries"
            )
    try:
        ext.source.bind_pod(ns, name, args.pod_uid, node)
    except Exception:
        _rollback(ext.source, ns, name)
        raise
    log.info(
        "bound %s to %s GPU %d (%d%% core, %d MiB, predicted gain %.2f)",
        where,
        node,
        share.gpu_index,
        share.core_percent,
        share.memory_mib,
        result.predicted_gain,
    )


def _bindable_pod(
    source: ClusterSource, args: BindingArgs, where: str
) -> tuple[dict[str, Any], PodDemand] | None:
    """The pod to bind and what it asks, after every check that needs only the pod (None:
    it is already bound to the named node); refusals raise with the reason."""
    ns, name, node = args.pod_namespace, args.pod_name, args.node
    pod = source.get_pod(ns, name)
    if pod is None:
        raise ValidationError(f"{where} no longer exists")
    meta = pod.get("metadata") or {}
    if args.pod_uid and meta.get("uid") and meta["uid"] != args.pod_uid:
        raise ValidationError(f"{where} was replaced (uid {meta['uid']}, not {args.pod_uid})")
    spec = pod.get("spec") or {}
    demand = pod_demand(pod)
    if not demand.interested:
        # The extender binds with the operator's cluster-wide pods/binding, and a Binding
        # skips NoSchedule taints: binding a pod Horus does not place would put any
        # pending pod on whatever node the caller names. Such pods are kube-scheduler's.
        raise ValidationError(
            f"{where} requests no Horus resource ({c.RESOURCE_GPU_CORE}, "
            f"{c.RESOURCE_GPU_MEMORY}); the extender binds only pods that do"
        )
    if spec.get("schedulerName") == c.SCHEDULER_NAME:
        raise ValidationError(
            f"{where} has schedulerName {c.SCHEDULER_NAME}: a DLJob replica, which the "
            "operator places and binds itself"
        )
    bound = spec.get("nodeName")
    if bound:
        if bound == node:
            return None
        raise ValidationError(f"{where} is already bound to node {bound}")
    if demand.request is None:
        raise ValidationError(demand.problem or "the pod cannot be placed")
    return pod, demand


def _check_target(pod: dict[str, Any], node: str, where: str, objs: LiveObjects) -> None:
    """Refuse a node the pod's own constraints rule out, or one where a twin awaits
    Allocate."""
    # The caller names the node; the pod's own constraints decide whether it may go there
    # (kube-scheduler filtered by them, but a Binding is not checked against them, and a
    # node outside them — a control-plane node, another tenant's pool — must stay so).
    target = next((n for n in objs.nodes if (n.get("metadata") or {}).get("name") == node), None)
    if target is None:
        raise ValidationError(f"node {node} does not exist")
    why_not = constraints_of(pod).why_not(target)
    if why_not is not None:
        raise ValidationError(f"node {node} is not one {where} allows: {why_not}")
    if not BindGate(objs.pods, objs.nodes).claim(node, pod):
        # A real kubelet's Allocate names no pod and comes per resource: a pod still
        # waiting on this node that asks the same amount of either resource could be
        # handed this pod's share (allocate_order).
        raise ValidationError(
            f"a pod asking the same gpu-core or gpu-memory amount still awaits its GPU on "
            f"node {node}; the scheduler retries once it has it"
        )


def _rollback(source: ClusterSource, namespace: str, name: str) -> None:
    """Remove an assignment that did not lead to a binding (best effort)."""
    try:
        source.patch_pod_annotations(
            namespace,
            name,
            {
                c.ANNOTATION_GPU_ASSIGNMENT: None,
                c.ANNOTATION_ASSIGNMENT_SIGNATURE: None,
                c.ANNOTATION_PREDICTED: None,
            },
        )
    except Exception as exc:  # the record stays; the next bind of this pod replaces it
        log.warning("could not roll back the assignment of %s/%s: %s", namespace, name, exc)
