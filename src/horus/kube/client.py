"""A Kubernetes API client from a kubeconfig file, the pod's ServiceAccount, or the defaults.

One order and one error text for every role: an explicit file (``--kubeconfig``) must exist
and be usable; without one, in-cluster credentials are used when running in a pod, else
``$KUBECONFIG`` / ``~/.kube/config``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from horus.common.errors import ConfigError

__all__ = ["api_client", "load_default_config"]


def _load(kubeconfig: str | Path | None, into: Any) -> None:
    from kubernetes import config as _config

    config: Any = _config
    if kubeconfig:
        path = Path(kubeconfig)
        if not path.is_file():
            raise ConfigError(f"kubeconfig {path} does not exist (--kubeconfig)")
        try:
            config.load_kube_config(config_file=str(path), client_configuration=into)
        except (config.ConfigException, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"kubeconfig {path} is not usable: {exc}") from None
        return
    try:
        config.load_incluster_config(client_configuration=into)
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=into)
        except (config.ConfigException, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                "no Kubernetes credentials: not running in a pod, and no kubeconfig "
                f"($KUBECONFIG or ~/.kube/config): {exc}; pass --kubeconfig"
            ) from None


def api_client(kubeconfig: str | Path | None = None, pool_size: int | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` (``pool_size``: HTTP connections it may keep open,
    one per thread that talks to the apiserver at once)."""
    from kubernetes import client

    cfg = client.Configuration()
    _load(kubeconfig, cfg)
    if pool_size is not None:
        cfg.connection_pool_maxsize = max(pool_size, 4)
    return client.ApiClient(cfg)


def load_default_config(kubeconfig: str | Path | None = None) -> None:
    """Load credentials into the client's *default* configuration (what kopf logs in with,
    and what ``client.Configuration.get_default_copy()`` returns afterwards)."""
    from kubernetes import client

    cfg = client.Configuration()
    _load(kubeconfig, cfg)
    client.Configuration.set_default(cfg)
