"""The apiserver's own address: which one, how the apiserver is started on it, and the refusal
of real nodes on a cluster started without one (without root)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from horus.common.errors import ClusterError
from horus.devcluster import apiaddress, certs, hostenv
from horus.devcluster.cluster import SERVICE_CIDR, _apiserver_argv


def test_each_port_has_its_own_private_address_outside_every_pod_and_service_range() -> None:
    addresses = {apiaddress.address_for(p) for p in (1, 255, 256, 20000, 32767, 65535)}
    assert len(addresses) == 6
    pod_ranges = [ipaddress.ip_network(f"10.{n}.0.0/16") for n in hostenv.NET_INDICES]
    for a in addresses:
        ip = ipaddress.ip_address(a)
        # an endpoint may be none of these (the apiserver's Endpoints validation)
        assert ip.is_private and not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)
        assert ip not in ipaddress.ip_network(SERVICE_CIDR)
        assert not any(ip in r for r in pod_ranges)
    assert apiaddress.address_for(0x5321) == "10.255.83.33"
    assert len(apiaddress.interface_for(65535)) <= 15  # Linux's interface name limit
    with pytest.raises(ValueError):
        apiaddress.address_for(0)


def _creds(tmp_path: Path, address: str) -> certs.Credentials:
    return certs.generate(tmp_path, address)


def test_on_its_own_address_the_apiserver_publishes_itself(tmp_path: Path) -> None:
    address = apiaddress.address_for(21485)
    argv = _apiserver_argv(
        tmp_path, {"etcd": 1, "kube-apiserver": 21485}, _creds(tmp_path, address), address
    )
    assert f"--bind-address={address}" in argv and f"--advertise-address={address}" in argv
    assert not [a for a in argv if a.startswith("--endpoint-reconciler-type")]  # lease, default


def test_on_loopback_it_publishes_nothing(tmp_path: Path) -> None:
    lo = apiaddress.LOOPBACK
    argv = _apiserver_argv(tmp_path, {"etcd": 1, "kube-apiserver": 2}, _creds(tmp_path, lo), lo)
    assert "--bind-address=127.0.0.1" in argv and "--endpoint-reconciler-type=none" in argv


def test_the_serving_certificate_names_the_address(tmp_path: Path) -> None:
    from cryptography import x509

    address = apiaddress.address_for(30000)
    creds = _creds(tmp_path, address)
    cert = x509.load_pem_x509_certificate(creds.serving_cert.read_bytes())
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    got = {str(i) for i in ips.get_values_for_type(x509.IPAddress)}
    assert got == {"127.0.0.1", address, certs.SERVICE_IP}


def test_real_nodes_are_refused_on_a_loopback_apiserver() -> None:
    with pytest.raises(ClusterError, match=r"without root.*'up' as root"):
        apiaddress.require_routable(apiaddress.LOOPBACK)
    apiaddress.require_routable(apiaddress.address_for(30000))
