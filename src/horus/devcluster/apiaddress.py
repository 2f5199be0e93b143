"""The apiserver's own address on this host: reachable from the host and its pods, from nothing
off the host, and one that may be a Service endpoint.

Pods reach the apiserver as on any cluster: through the ``kubernetes`` Service
(``10.96.0.1:443``), whose endpoint the apiserver itself publishes (its lease endpoint
reconciler, the default) and which kube-proxy carries like every other Service. An endpoint may
not be a loopback or link-local address, so the apiserver cannot listen on ``127.0.0.1`` for
that; binding every address (``0.0.0.0``) would put a dev cluster on the network the machine
sits on. So ``up`` (as root) gives each cluster a private ``/32``, ``10.255.H.L`` with ``H.L``
the two bytes of the apiserver's port, on an interface of its own, ``hapi<port>``:

* the interface is a **bridge with no ports**: the address is local to the host (the kernel's
  ``local`` route) and nothing is attached to it. A bridge, not a ``dummy`` link, because the
  bridge driver is already what real nodes need and the ``dummy`` module is not in every kernel
  (it is missing from the one this project's CI runs on);
* a filter chain ``HORUS-API-<port>``, jumped to from ``INPUT`` for that address, lets in only
  what comes from this host (``lo``) or from the real nodes' pod bridges (``hd*``) and drops
  the rest: a neighbour that routes ``10.255.0.0/16`` to this machine gets nothing;
* the interface's name is the claim: creating it fails when another cluster holds the port, so
  two clusters started at once never share an address;
* ``down`` (:func:`release`) deletes the chain, its jump and the interface.

Without root none of this can be made, and ``up`` falls back to what needs no privilege: the
apiserver on ``127.0.0.1``, no endpoint for ``kubernetes`` (``--endpoint-reconciler-type=none``).
That is enough for kwok nodes, whose pods never run; real nodes need root anyway, and
``add-nodes --real`` refuses such a cluster with the reason (:func:`require_routable`).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess

from horus.common.errors import ClusterError

LOOPBACK = "127.0.0.1"
#: Private addresses for apiservers (``10.255.H.L/32``): outside every real node pod range
#: (``10.200-249.0.0/16``, :data:`horus.devcluster.hostenv.NET_INDICES`) and the service range.
ADDRESS_PREFIX = "10.255"
#: Interfaces this host's pods come in by: the real nodes' bridges (``hd<N>n<K>``).
POD_BRIDGES = "hd+"


def address_for(port: int) -> str:
    """The apiserver address of a cluster whose apiserver listens on ``port``."""
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    return f"{ADDRESS_PREFIX}.{port >> 8}.{port & 0xFF}"


def interface_for(port: int) -> str:
    return f"hapi{port}"


def chain_for(port: int) -> str:
    return f"HORUS-API-{port}"


def iptables(*args: str) -> subprocess.CompletedProcess[str]:
    """``iptables -w``: waits for the xtables lock that kube-proxies and kubelets also take."""
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=60)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=60)


def can_make() -> bool:
    """Whether this process may make the interface and the filter (root)."""
    return os.geteuid() == 0


def _taken_by_host(address: str) -> str:
    """The host address whose network holds ``address`` (then it is not ours to use), or ""."""
    out = _ip("-4", "-o", "addr", "show").stdout
    ip = ipaddress.ip_address(address)
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            net = ipaddress.ip_interface(fields[fields.index("inet") + 1]).network
            if ip in net and not fields[1].startswith("hapi"):
                return f"{fields[1]} {net}"
    return ""


def claim(port: int, comment: str) -> bool:
    """Make ``hapi<port>`` with :func:`address_for` and its filter; False when another cluster
    already holds the port's interface (pick another port). Raises when the host's own
    networks hold the address or a step fails; undoes its own steps then."""
    address, link = address_for(port), interface_for(port)
    clash = _taken_by_host(address)
    if clash:
        raise ClusterError(
            f"the apiserver address {address} lies in this host's network ({clash}); the dev "
            f"cluster uses {ADDRESS_PREFIX}.0.0/16 for its apiservers and cannot share it"
        )
    made = _ip("link", "add", link, "type", "bridge")
    if made.returncode != 0:
        if "exists" in made.stderr:
            return False
        raise ClusterError(f"cannot create the apiserver's interface {link}: {made.stderr.strip()}")
    try:
        for step in (
            ("addr", "add", f"{address}/32", "dev", link),
            ("link", "set", link, "up"),
        ):
            proc = _ip(*step)
            if proc.returncode != 0:
                raise ClusterError(f"ip {' '.join(step)}: {proc.stderr.strip()}")
        _add_filter(port, address, comment)
    except BaseException:
        release(port)
        raise
    return True


def _jump(port: int) -> list[str]:
    return ["INPUT", "-d", f"{address_for(port)}/32", "-j", chain_for(port)]


def _add_filter(port: int, address: str, comment: str) -> None:
    chain = chain_for(port)
    iptables("-N", chain)
    iptables("-F", chain)
    rules = (
        ["-i", "lo", "-j", "RETURN"],
        ["-i", POD_BRIDGES, "-j", "RETURN"],
        ["-m", "comment", "--comment", comment, "-j", "DROP"],
    )
    for rule in rules:
        proc = iptables("-A", chain, *rule)
        if proc.returncode != 0:
            raise ClusterError(f"iptables -A {chain}: {proc.stderr.strip()}")
    proc = iptables("-I", *_jump(port))
    if proc.returncode != 0:
        raise ClusterError(f"iptables: cannot filter {address}: {proc.stderr.strip()}")


def release(port: int) -> list[str]:
    """Remove the jump, the chain and the interface of ``port``; what could not be removed."""
    left = []
    while iptables("-D", *_jump(port)).returncode == 0:
        pass
    chain = chain_for(port)
    if iptables("-S", chain).returncode == 0:
        iptables("-F", chain)
        proc = iptables("-X", chain)
        if proc.returncode != 0:
            left.append(f"chain {chain}: {proc.stderr.strip()}")
    link = interface_for(port)
    if _ip("link", "show", link).returncode == 0:
        proc = _ip("link", "del", link)
        if proc.returncode != 0:
            left.append(f"interface {link}: {proc.stderr.strip()}")
    return left


def require_routable(address: str) -> None:
    """Refuse real nodes on a cluster whose apiserver pods could not reach."""
    if ipaddress.ip_address(address).is_loopback:
        raise ClusterError(
            "this cluster's apiserver listens on 127.0.0.1 only (it was started without root, "
            "so it has no address of its own for the 'kubernetes' Service, and pods could not "
            "reach it): run 'horus dev cluster down', then 'up' as root, to add real nodes"
        )
