"""Canary: private key material and bearer tokens never show in trust's errors or reprs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grid.errors import GridError
from grid.trust import (
    TrustPins,
    build_client_context,
    check_public_cert_pem,
    fingerprint,
    normalize_fingerprint,
    parse_address,
    probe_site,
)
from support.canary import Canaries, pem_body
from support.pki import Pki, make_pki

NOW = datetime.now(UTC)
TOKEN = f"grid-canary-{uuid.uuid4().hex}"
BEARER = f"Bearer {TOKEN}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), ("site-a",))


def canaries_of(pki: Pki) -> Canaries:
    """The token and every private key of the PKI; the certificates are public."""
    keys = [pki.ca.private_key_pem(), pki["site-a"].issued.private_key_pem()]
    return Canaries(
        [TOKEN.encode(), *(pem_body(key) for key in keys)],
        public=[pki.ca_pem, pki["site-a"].certificate_pem],
    )


def assert_clean(text: str, pki: Pki) -> None:
    canaries_of(pki).assert_absent(text, "an error or a repr")


def raised_text(action) -> str:
    with pytest.raises(GridError) as raised:
        action()
    error = raised.value
    return f"{error}\n{error!r}\n{error.args!r}\n{error.__cause__!r}\n{error.__context__!r}"


def test_pem_refusals_quote_nothing(pki: Pki) -> None:
    key = pki["site-a"].issued.private_key_pem().decode()
    cert = pki["site-a"].certificate_pem
    messages = [
        key,
        cert + key,
        key + cert,
        cert + BEARER,
        BEARER,
        f"-----BEGIN {TOKEN.upper().replace('-', ' ')}-----\nQUJD\n-----END {TOKEN.upper().replace('-', ' ')}-----\n",
        cert.replace("-----END CERTIFICATE-----", TOKEN + "\n-----END CERTIFICATE-----"),
    ]
    for message in messages:
        assert_clean(raised_text(lambda m=message: check_public_cert_pem(m, NOW)), pki)
        assert_clean(raised_text(lambda m=message: check_public_cert_pem(m.encode(), NOW)), pki)


def test_fingerprint_and_pin_errors_quote_nothing(pki: Pki) -> None:
    key = pki["site-a"].issued.private_key_pem()
    assert_clean(raised_text(lambda: fingerprint(key)), pki)
    assert_clean(raised_text(lambda: fingerprint(TOKEN.encode())), pki)
    assert_clean(raised_text(lambda: normalize_fingerprint(BEARER)), pki)
    assert_clean(raised_text(lambda: TrustPins(BEARER)), pki)
    assert_clean(raised_text(lambda: parse_address(BEARER)), pki)
    assert_clean(raised_text(lambda: parse_address(f"{TOKEN}:99999")), pki)
    assert_clean(raised_text(lambda: build_client_context(ca_pem=key.decode())), pki)


def test_reprs_hold_no_keys(pki: Pki) -> None:
    for item in (pki.ca, pki["site-a"].issued, pki["site-a"], pki):
        assert_clean(repr(item), pki)
        assert_clean(str(item), pki)


async def test_probe_errors_quote_no_file_contents(pki: Pki, tmp_path: Path) -> None:
    token_file = tmp_path / "token.key"
    token_file.write_text(BEARER + "\n")
    key_as_cert = pki["site-a"].files.private_key
    results = [
        await probe_site("127.0.0.1:1", client_cert=token_file, client_key=token_file),
        await probe_site(
            "127.0.0.1:1", client_cert=key_as_cert, client_key=pki["site-a"].files.private_key
        ),
        await probe_site("127.0.0.1:1", ca_pem=BEARER),
        await probe_site(BEARER),
    ]
    for result in results:
        assert result.error
        assert_clean(repr(result), pki)
