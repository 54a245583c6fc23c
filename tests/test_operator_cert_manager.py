"""A site certificate issued and renewed the way cert-manager does it, on a real API server:
README's install, then the site's TLS Secret rewritten in cert-manager's layout (a
``kubernetes.io/tls`` Secret with ``tls.crt``, an ECDSA key in its default PKCS#1/SEC1
encoding, and the issuing CA in ``ca.crt``), the network reading its CA from that same
Secret as docs/install.md's "With cert-manager" says, and renewed in place with a new key.
No cert-manager controller runs here: the test writes what it would write.
"""

from __future__ import annotations

import base64
import functools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from grid.trust.authority import CertificateAuthority, IssuedCertificate
from k8s.control_plane import ControlPlane
from k8s.fixtures import ControlPlaneFactory
from k8s.operator_process import (
    MESH_NAMESPACE,
    NETWORK,
    SITE,
    JsonObject,
    grid_object,
    reconciled,
    run_install,
    start_installed_operator,
)
from k8s.operator_support import condition

pytestmark = pytest.mark.timeout(300)

SITE_SECRET = "glb-demo-site-tls"


def cert_manager_secret(issued: IssuedCertificate, ca: CertificateAuthority) -> JsonObject:
    """The Secret cert-manager writes for a Certificate: its layout, annotations and key
    encoding (ECDSA keys are SEC1 PEM unless the Certificate asks for PKCS#8)."""
    key = serialization.load_pem_private_key(issued.private_key_pem(), None)
    sec1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert sec1.startswith(b"-----BEGIN EC PRIVATE KEY-----")

    def encoded(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": SITE_SECRET,
            "namespace": MESH_NAMESPACE,
            "annotations": {
                "cert-manager.io/certificate-name": SITE_SECRET,
                "cert-manager.io/issuer-kind": "ClusterIssuer",
                "cert-manager.io/issuer-name": "glb-demo-ca",
                "cert-manager.io/common-name": SITE,
                "cert-manager.io/alt-names": SITE,
            },
        },
        "data": {
            "tls.crt": encoded(issued.certificate_pem.encode()),
            "tls.key": encoded(sec1),
            "ca.crt": encoded(ca.certificate_pem.encode()),
        },
    }


def not_after(issued: IssuedCertificate) -> datetime:
    return x509.load_pem_x509_certificate(issued.certificate_pem.encode()).not_valid_after_utc


def certificate_not_after(plane: ControlPlane, expected: datetime) -> JsonObject | None:
    """The site's GridSite status once it reports ``expected`` as its certificate's expiry."""
    status = grid_object(plane.admin, "gridsites", SITE).get("status") or {}
    reported = status.get("certificateNotAfter")
    if reported is None:
        return None
    when = datetime.fromisoformat(reported.replace("Z", "+00:00"))
    return status if when == expected else None


def config_invalid(plane: ControlPlane) -> JsonObject | None:
    network = grid_object(plane.admin, "gridnetworks", NETWORK)
    valid = condition(network.get("status") or {}, "ConfigValid")
    return valid if valid["status"] == "False" else None


def test_a_cert_manager_secret_is_read_and_its_renewal_taken_in_place(
    control_plane_factory: ControlPlaneFactory, tmp_path: Path
) -> None:
    plane = control_plane_factory("cert-manager")
    run_install(plane)
    now = datetime.now(UTC)
    ca = CertificateAuthority.generate("glb-demo CA (cert-manager)", now=now)
    first = ca.issue(SITE, now=now, valid_for=timedelta(days=90))
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(cert_manager_secret(first, ca)))
    # docs/install.md "With cert-manager": the CA from the site's own Secret, no pin (a
    # renewal with a new key changes the fingerprint; the CA vouches for the site).
    tls = {"caSecretRef": {"name": SITE_SECRET, "namespace": MESH_NAMESPACE, "key": "ca.crt"}}
    plane.kubectl(
        "patch", "gridnetwork", NETWORK, "--type", "merge",
        "-p", json.dumps({"spec": {"tls": tls}}),
    )  # fmt: skip
    plane.kubectl(
        "patch", "gridsite", SITE, "--type", "merge",
        "-p", json.dumps({"spec": {"trust": {"certFingerprint": None}}}),
    )  # fmt: skip
    operator, _ = start_installed_operator(plane, tmp_path)
    with operator:
        operator.until(
            "the operator reads the cert-manager Secret",
            lambda: certificate_not_after(plane, not_after(first)),
        )
        network = operator.until(
            "glb-demo reconciled",
            functools.partial(
                reconciled, plane.admin, "gridnetworks", NETWORK, "ConfigValid", "MembershipReady"
            ),
        )
        assert condition(network["status"], "ConfigValid")["status"] == "True"
        assert condition(network["status"], "MembershipReady")["status"] == "True"

        # cert-manager renews in place: a new key and certificate in the same Secret.
        later = datetime.now(UTC) + timedelta(minutes=1)
        renewed = ca.issue(SITE, now=later, valid_for=timedelta(days=90))
        assert not_after(renewed) != not_after(first)
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(cert_manager_secret(renewed, ca)))
        operator.until(
            "the operator takes the renewed certificate without a restart",
            lambda: certificate_not_after(plane, not_after(renewed)),
        )
        network = grid_object(plane.admin, "gridnetworks", NETWORK)
        assert condition(network["status"], "ConfigValid")["status"] == "True"
        assert operator.process.poll() is None, "the same operator process"
        # It says it took the new certificate, naming its fingerprint (never the key).
        assert f"site certificate {renewed.fingerprint}" in operator.log_text()
        # The SWIM node signs with it at once, renewed in place (peers never see it leave).
        assert f"renewed site certificate {renewed.fingerprint}, no restart" in operator.log_text()
        assert "restarting the node" not in operator.log_text()

        # A renewal the site cannot use (issued for another site) is refused with the
        # reason, and the certificate in use keeps serving, advertised as before.
        wrong = ca.issue("west-edge", now=later, valid_for=timedelta(days=30))
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(cert_manager_secret(wrong, ca)))
        refused = operator.until("the wrong certificate refused", lambda: config_invalid(plane))
        assert "the node keeps the current one" in refused["message"]
        assert 'does not name site "east-edge"' in refused["message"]
        # The certificate advertised (and reported) is still the one the node signs with.
        assert certificate_not_after(plane, not_after(renewed)) is not None
        assert operator.stop() == 0
