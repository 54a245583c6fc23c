"""The TLS probe and the trust verdict, over real TLS handshakes on 127.0.0.1."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grid.errors import TrustConfigError
from grid.trust import (
    PinSlot,
    TrustPins,
    TrustStatus,
    build_client_context,
    decide_site_trust,
    parse_address,
    probe_site,
    self_signed_certificate,
)
from support.pki import Pki, make_pki
from support.servers import PlainTcpServer, TlsServer, closed_port

# Enough for a loopback peer to send its alert; the default is for real networks.
SETTLE = 0.05


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def foreign_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("foreign"), ca_name="Foreign CA")


# --- pinning ---------------------------------------------------------------------------


async def test_a_matching_pin_makes_the_site_trusted(pki: Pki) -> None:
    site = pki["site-a"]
    async with TlsServer(site.files) as server:
        probe = await probe_site(server.address, settle_s=SETTLE)
    assert probe.ok
    assert probe.reachable
    assert probe.fingerprint == site.fingerprint
    assert 0 < probe.latency_s < 5
    verdict = decide_site_trust(probe, TrustPins(site.fingerprint))
    assert verdict.trusted
    assert verdict.matched is PinSlot.PRIMARY


async def test_a_different_certificate_is_not_trusted(pki: Pki) -> None:
    async with TlsServer(pki["site-b"].files) as server:
        probe = await probe_site(server.address, settle_s=SETTLE)
    assert probe.ok
    verdict = decide_site_trust(probe, TrustPins(pki["site-a"].fingerprint))
    assert not verdict.trusted
    assert verdict.status is TrustStatus.FINGERPRINT_MISMATCH
    assert pki["site-b"].fingerprint in verdict.reason


async def test_the_previous_pin_is_accepted_during_rotation(pki: Pki) -> None:
    old, new = pki["site-a"], pki["site-c"]
    async with TlsServer(old.files) as server:
        probe = await probe_site(server.address, settle_s=SETTLE)
    rotating = decide_site_trust(probe, TrustPins(new.fingerprint, previous=old.fingerprint))
    assert rotating.trusted
    assert rotating.matched is PinSlot.PREVIOUS
    assert "rotation" in rotating.reason
    finished = decide_site_trust(probe, TrustPins(new.fingerprint))
    assert finished.status is TrustStatus.FINGERPRINT_MISMATCH


async def test_a_self_signed_certificate_is_trusted_by_its_pin(tmp_path: Path) -> None:
    lonely = self_signed_certificate("lonely", now=datetime.now(UTC))
    async with TlsServer(lonely.write(tmp_path, "lonely")) as server:
        probe = await probe_site(server.address, settle_s=SETTLE)
    assert decide_site_trust(probe, TrustPins(lonely.fingerprint)).trusted


async def test_an_unpinned_site_is_never_trusted(pki: Pki) -> None:
    async with TlsServer(pki["site-a"].files) as server:
        probe = await probe_site(server.address, settle_s=SETTLE)
    assert probe.ok
    assert decide_site_trust(probe, None).status is TrustStatus.NOT_PINNED


# --- chain verification ----------------------------------------------------------------


async def test_with_a_ca_the_chain_and_name_are_verified(pki: Pki) -> None:
    site = pki["site-a"]
    async with TlsServer(site.files) as server:
        by_ip = await probe_site(server.address, ca_pem=pki.ca_pem, settle_s=SETTLE)
        by_name = await probe_site(
            server.address, ca_pem=pki.ca_pem, server_hostname="site-a", settle_s=SETTLE
        )
        wrong_name = await probe_site(
            server.address, ca_pem=pki.ca_pem, server_hostname="site-b", settle_s=SETTLE
        )
    assert by_ip.ok and by_ip.fingerprint == site.fingerprint
    assert by_name.ok
    assert not wrong_name.ok
    assert wrong_name.reachable
    assert "certificate verification failed" in (wrong_name.error or "")
    assert "site-b" in (wrong_name.error or "")


async def test_with_a_ca_a_foreign_certificate_fails_the_handshake(
    pki: Pki, foreign_pki: Pki
) -> None:
    async with TlsServer(foreign_pki["site-a"].files) as server:
        probe = await probe_site(server.address, ca_pem=pki.ca_pem, settle_s=SETTLE)
    assert probe.reachable and probe.fingerprint is None
    assert "certificate verification failed" in (probe.error or "")
    verdict = decide_site_trust(probe, TrustPins(foreign_pki["site-a"].fingerprint))
    assert verdict.status is TrustStatus.HANDSHAKE_FAILED


async def test_a_prepared_context_is_used_as_given(pki: Pki) -> None:
    context = build_client_context(ca_pem=pki.ca_pem)
    async with TlsServer(pki["site-a"].files) as server:
        probe = await probe_site(server.address, ssl_context=context, settle_s=SETTLE)
    assert probe.ok
    both = await probe_site("127.0.0.1:1", ssl_context=context, ca_pem=pki.ca_pem)
    assert "not both" in (both.error or "")


# --- mutual TLS ------------------------------------------------------------------------


async def test_mutual_tls_with_a_client_certificate(pki: Pki) -> None:
    client = pki["site-b"]
    async with TlsServer(
        pki["site-a"].files, client_ca_file=pki.ca_file, require_client_cert=True
    ) as server:
        probe = await probe_site(
            server.address,
            ca_pem=pki.ca_pem,
            client_cert=client.files.certificate,
            client_key=client.files.private_key,
        )
    assert probe.ok, probe.error
    assert server.client_names == ["site-b"]
    assert decide_site_trust(probe, TrustPins(pki["site-a"].fingerprint)).trusted


async def test_mutual_tls_without_a_client_certificate_is_refused(pki: Pki) -> None:
    async with TlsServer(
        pki["site-a"].files, client_ca_file=pki.ca_file, require_client_cert=True
    ) as server:
        probe = await probe_site(server.address)
    assert probe.reachable
    assert probe.fingerprint == pki["site-a"].fingerprint
    assert not probe.ok
    assert "client certificate" in (probe.error or "")
    assert server.client_names == []
    verdict = decide_site_trust(probe, TrustPins(pki["site-a"].fingerprint))
    assert verdict.status is TrustStatus.HANDSHAKE_FAILED
    assert verdict.matched is PinSlot.PRIMARY


async def test_mutual_tls_with_a_foreign_client_certificate_is_refused(
    pki: Pki, foreign_pki: Pki
) -> None:
    stranger = foreign_pki["site-b"]
    async with TlsServer(
        pki["site-a"].files, client_ca_file=pki.ca_file, require_client_cert=True
    ) as server:
        probe = await probe_site(
            server.address,
            client_cert=stranger.files.certificate,
            client_key=stranger.files.private_key,
        )
    assert not probe.ok
    assert server.client_names == []
    assert not decide_site_trust(probe, TrustPins(pki["site-a"].fingerprint)).trusted


async def test_an_optional_client_certificate_may_be_omitted(pki: Pki) -> None:
    async with TlsServer(pki["site-a"].files, client_ca_file=pki.ca_file) as server:
        probe = await probe_site(server.address)
    assert probe.ok
    assert server.client_names == [None]


# --- failures come back as results ----------------------------------------------------


async def test_a_refused_connection_is_unreachable() -> None:
    probe = await probe_site(f"127.0.0.1:{closed_port()}")
    assert not probe.reachable
    assert probe.error == "connection refused"
    assert decide_site_trust(probe, TrustPins("0" * 64)).status is TrustStatus.UNREACHABLE


async def test_a_silent_peer_times_out_within_the_budget() -> None:
    async with PlainTcpServer(None) as server:
        started = time.perf_counter()
        probe = await probe_site(server.address, timeout=0.3)
        elapsed = time.perf_counter() - started
    assert probe.reachable and probe.fingerprint is None
    assert "TLS handshake timed out after 0.3s" in (probe.error or "")
    # Well under any OS connect or read timeout, with room for a loaded machine.
    assert elapsed < 3.0


@pytest.mark.parametrize(
    "reply", [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", b""], ids=["http", "hangup"]
)
async def test_a_peer_that_does_not_speak_tls_fails_the_handshake(reply: bytes) -> None:
    async with PlainTcpServer(reply) as server:
        probe = await probe_site(server.address, timeout=2)
    assert probe.reachable
    assert probe.fingerprint is None
    assert probe.error
    assert decide_site_trust(probe, TrustPins("0" * 64)).status is TrustStatus.HANDSHAKE_FAILED


@pytest.mark.parametrize(
    "address",
    ["", "nohost", ":7946", "host:", "host:0", "host:65536", "host:port", "[::1", "::1:80"],
)
async def test_a_malformed_address_is_reported(address: str) -> None:
    probe = await probe_site(address)
    assert not probe.reachable
    assert probe.error is not None and "address" in probe.error
    with pytest.raises(TrustConfigError):
        parse_address(address)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:443", ("127.0.0.1", 443)),
        ("[::1]:7946", ("::1", 7946)),
        ("site-a.grid.test:8443", ("site-a.grid.test", 8443)),
    ],
)
def test_addresses_parse(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


async def test_unusable_client_material_is_reported(pki: Pki, tmp_path: Path) -> None:
    a, b = pki["site-a"], pki["site-b"]
    missing = await probe_site(
        "127.0.0.1:1", client_cert=a.files.certificate, client_key=tmp_path / "nope.key"
    )
    assert "not found" in (missing.error or "")
    half = await probe_site("127.0.0.1:1", client_cert=a.files.certificate)
    assert "both" in (half.error or "")
    mismatched = await probe_site(
        "127.0.0.1:1", client_cert=a.files.certificate, client_key=b.files.private_key
    )
    assert "do not belong together" in (mismatched.error or "")
    bad_ca = await probe_site("127.0.0.1:1", ca_pem="not a certificate")
    assert "CA certificate" in (bad_ca.error or "")
    for probe in (missing, half, mismatched, bad_ca):
        assert not probe.reachable and probe.fingerprint is None
