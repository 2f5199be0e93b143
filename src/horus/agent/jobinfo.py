"""What the agent looks up about a pod's job through the API: its graph profile (its DLJob's,
inline or from a ConfigMap; for a pod of any other owner its own annotation, inline or naming
a ConfigMap of its namespace) and its DLJob's replica count, each cached for
:data:`PROFILE_TTL` seconds so a cycle asks the apiserver at most once per job (per ConfigMap
for pods that name one: a Deployment's replicas share one read)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from horus.agent.kube import AgentApi
from horus.agent.pods import PodInfo, SkipLog
from horus.api.dljob import ConfigMapProfileRef, InlineProfile, parse_dljob, parse_profile_document
from horus.common import constants as c
from horus.common.errors import HorusError, ValidationError
from horus.kube.errors import ApiError
from horus.predictor.interface import GraphProfile

PROFILE_TTL = 300.0

_CONFIGMAP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # DNS-1123 subdomain
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def configmap_ref(text: str) -> tuple[str, str]:
    """``(name, key)`` of a ``horus.io/graph-profile-configmap`` value, ``<name>`` (key
    :data:`~horus.common.constants.PROFILE_CONFIGMAP_DEFAULT_KEY`) or ``<name>/<key>``;
    ``ValidationError`` naming the annotation otherwise."""
    name, _, key = text.partition("/")
    key = key or c.PROFILE_CONFIGMAP_DEFAULT_KEY
    if not _CONFIGMAP_NAME.match(name) or not _CONFIGMAP_KEY.match(key):
        raise ValidationError(
            f"annotation {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP}: must be '<ConfigMap name>' or "
            f"'<ConfigMap name>/<key>', got {text[:80]!r}"
        )
    return name, key


class JobLookups:
    """The profile and replica-count lookups of one agent, with their caches."""

    def __init__(self, kube: AgentApi, skips: SkipLog) -> None:
        self.kube = kube
        self.skips = skips
        self._profiles: dict[tuple[str, str], tuple[float, GraphProfile | None]] = {}
        self._replicas: dict[tuple[str, str], tuple[float, int | None]] = {}

    def profile(self, pod: PodInfo) -> GraphProfile | None:
        """The pod's graph profile: its DLJob's (inline or ConfigMap), or its own annotation
        (inline, which wins, or the ConfigMap it names). A profile that cannot be read is
        said once (:class:`SkipLog`) and taken as unknown, never raised."""
        from horus.predictor.schema import profile_from_dict

        if pod.job:
            key = (pod.namespace, pod.job)
        elif pod.graph_profile or not pod.profile_configmap:
            key = (pod.namespace, f"pod:{pod.name}")
        else:
            key = (pod.namespace, f"configmap:{pod.profile_configmap}")
        now = time.monotonic()
        hit = self._profiles.get(key)
        if hit is not None and now - hit[0] < PROFILE_TTL:
            return hit[1]
        profile: GraphProfile | None = None
        where = f"pod {pod.key}"
        try:
            if pod.job:
                obj = self.kube.dljob(pod.namespace, pod.job)
                if obj is not None:
                    src = parse_dljob(obj).spec.profile
                    inline: InlineProfile | None = None
                    if isinstance(src, ConfigMapProfileRef):
                        cm = self.kube.configmap(pod.namespace, src.name)
                        text = ((cm or {}).get("data") or {}).get(src.key)
                        if text:
                            inline = parse_profile_document(
                                text, f"configmap {pod.namespace}/{src.name}"
                            )
                    else:
                        inline = src
                    if inline is not None:
                        profile = profile_from_dict(inline.to_document(), f"dljob {pod.job}")
            elif pod.graph_profile:
                inline = parse_profile_document(pod.graph_profile, where)
                profile = profile_from_dict(inline.to_document(), where)
            elif pod.profile_configmap:
                profile = self._configmap_profile(pod.namespace, pod.profile_configmap)
        except (HorusError, ApiError) as exc:
            self.skips.warn(pod.uid, f"{where}: no graph profile for interference/feedback: {exc}")
        except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
            # A DLJob or ConfigMap of a shape no decoder expected: that pod's profile is
            # unknown (said once), the cycle and every other pod go on.
            self.skips.warn(
                pod.uid,
                f"{where}: no graph profile for interference/feedback: malformed DLJob or "
                f"ConfigMap ({type(exc).__name__}: {exc})",
            )
        self._profiles[key] = (now, profile)
        if len(self._profiles) > 10_000:
            self._profiles.clear()
        return profile

    def _configmap_profile(self, namespace: str, ref: str) -> GraphProfile:
        """The profile document under the ConfigMap key ``ref`` names (:func:`configmap_ref`),
        in ``namespace``; ``HorusError`` when the ConfigMap or the key is missing."""
        from horus.predictor.schema import profile_from_dict

        name, key = configmap_ref(ref)
        where = f"configmap {namespace}/{name}[{key}]"
        cm = self.kube.configmap(namespace, name)
        if cm is None:
            raise HorusError(
                f"ConfigMap {namespace}/{name} ({c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP}) not found"
            )
        data = cm.get("data")
        text = data.get(key) if isinstance(data, Mapping) else None
        if not isinstance(text, str) or not text:
            raise HorusError(
                f"ConfigMap {namespace}/{name} has no key {key!r} "
                f"({c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP}: {ref[:80]})"
            )
        inline = parse_profile_document(text, where)
        return profile_from_dict(inline.to_document(), where)

    def replica_count(self, pod: PodInfo) -> int | None:
        """How many replicas the pod's DLJob has (1 for a plain pod; None: unknown)."""
        if not pod.job:
            return 1
        key = (pod.namespace, pod.job)
        now = time.monotonic()
        hit = self._replicas.get(key)
        if hit is None or now - hit[0] > PROFILE_TTL:
            count: int | None = None
            try:
                obj = self.kube.dljob(pod.namespace, pod.job)
                count = parse_dljob(obj).spec.replicas if obj is not None else None
            except (HorusError, ApiError, TypeError, ValueError, AttributeError, KeyError):
                count = None
            hit = self._replicas[key] = (now, count)
            if len(self._replicas) > 10_000:
                self._replicas.clear()
        return hit[1]
