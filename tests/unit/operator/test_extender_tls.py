"""The extender's TLS material: what is generated, how the Secret is made, the settings."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.common.settings import load_settings
from horus.operator.extender import ExtenderSettings
from horus.operator.extender.tls import (
    TlsSource,
    generate_tls_secret_data,
    load_or_create_tls_secret,
    material_from_secret_data,
)


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_generated_set_signs_server_and_client_with_one_ca_and_keeps_no_ca_key() -> None:
    data = generate_tls_secret_data()
    assert set(data) == {
        c.EXTENDER_TLS_CA,
        c.EXTENDER_TLS_CERT,
        c.EXTENDER_TLS_KEY,
        c.EXTENDER_TLS_CLIENT_CERT,
        c.EXTENDER_TLS_CLIENT_KEY,
    }  # no CA key: nothing can issue another certificate from the Secret
    ca = _cert(data[c.EXTENDER_TLS_CA])
    server, client = _cert(data[c.EXTENDER_TLS_CERT]), _cert(data[c.EXTENDER_TLS_CLIENT_CERT])
    for leaf, usage in (
        (server, ExtendedKeyUsageOID.SERVER_AUTH),
        (client, ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        leaf.verify_directly_issued_by(ca)
        eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [usage]  # a server certificate cannot act as a client
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_secret_is_created_when_absent_and_read_back_on_a_race() -> None:
    from kubernetes.client.exceptions import ApiException

    class Core:
        def __init__(self, exists: dict[str, str] | None, race: bool = False) -> None:
            self.exists, self.race = exists, race
            self.created: list[Any] = []

        def read_namespaced_secret(self, name: str, ns: str) -> Any:
            assert (name, ns) == (c.EXTENDER_TLS_SECRET, c.HORUS_NAMESPACE)
            if self.exists is None:
                raise ApiException(status=404, reason="Not Found")
            return type("S", (), {"data": self.exists})()

        def create_namespaced_secret(self, ns: str, body: dict[str, Any]) -> Any:
            self.created.append(body)
            if self.race:  # another process created it first
                self.exists = {"tls.crt": "theirs"}
                raise ApiException(status=409, reason="Conflict")
            return type("S", (), {"data": body["data"]})()

    fresh = Core(None)
    data = load_or_create_tls_secret(fresh)
    (body,) = fresh.created
    assert body["type"] == "kubernetes.io/tls" and data == body["data"]
    material = material_from_secret_data(data, "Secret x")
    assert material.context() is not None  # loads together
    kept = Core({"tls.crt": "mine"})
    assert load_or_create_tls_secret(kept) == {"tls.crt": "mine"} and kept.created == []
    racing = Core(None, race=True)
    assert load_or_create_tls_secret(racing) == {"tls.crt": "theirs"}


def test_material_errors_name_the_missing_or_broken_entry() -> None:
    data = {k: base64.b64encode(v).decode() for k, v in generate_tls_secret_data().items()}
    with pytest.raises(ConfigError, match=r"no 'ca\.crt' entry"):
        material_from_secret_data({k: v for k, v in data.items() if k != "ca.crt"}, "Secret s")
    other = generate_tls_secret_data()
    data[c.EXTENDER_TLS_KEY] = base64.b64encode(other[c.EXTENDER_TLS_KEY]).decode()
    with pytest.raises(ConfigError, match="Secret s: server certificate and key do not load"):
        material_from_secret_data(data, "Secret s").context()


def test_tls_source_needs_files_or_an_apiserver_and_names_an_unreadable_file(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="needs files or an apiserver"):
        TlsSource(None)
    missing = tmp_path / "nope.crt"
    with pytest.raises(ConfigError, match=r"--tls-cert-file .*nope\.crt: cannot read"):
        TlsSource(None, (missing, missing, missing))


def test_settings_tls_files_all_or_none_and_ports_differ(tmp_path: Path) -> None:
    assert ExtenderSettings().tls_files is None  # the Secret
    f = tmp_path / "x"
    full = ExtenderSettings(tls_cert_file=f, tls_key_file=f, tls_client_ca_file=f)
    assert full.tls_files == (f, f, f)
    with pytest.raises(ConfigError, match="tls_cert_file given without tls_key_file"):
        ExtenderSettings(tls_cert_file=f)
    with pytest.raises(ConfigError, match="health_port must differ from port"):
        ExtenderSettings(port=9000, health_port=9000)
    with pytest.raises(ConfigError, match=r"health_port must be 0\.\.65535"):
        ExtenderSettings(health_port=70000)


def test_settings_precedence_cli_over_env_over_file(tmp_path: Path) -> None:
    cfg = tmp_path / "horus.yaml"
    cfg.write_text("extender:\n  health_port: 7001\n  tls_reload_seconds: 5\n")
    env = {"HORUS_EXTENDER_HEALTH_PORT": "7002"}
    got = load_settings(ExtenderSettings, "extender", cli={}, env=env, config_file=cfg)
    assert (got.health_port, got.tls_reload_seconds) == (7002, 5.0)
    got = load_settings(
        ExtenderSettings, "extender", cli={"health_port": 7003}, env=env, config_file=cfg
    )
    assert got.health_port == 7003
