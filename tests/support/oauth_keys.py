"""Key material for the OAuth tests: PEM private keys and Google-style service-account key
files, made fresh for each test run (never checked in)."""

from __future__ import annotations

import json
from functools import cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


@cache
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@cache
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


SERVICE_ACCOUNT = "grid-minter@grid-tests.iam.gserviceaccount.com"


def service_account_file(token_uri: str, key: rsa.RSAPrivateKey | None = None) -> bytes:
    """A key file in the layout Google's console downloads."""
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "grid-tests",
            "private_key_id": "0123456789abcdef",
            "private_key": pem(key or rsa_key()).decode(),
            "client_email": SERVICE_ACCOUNT,
            "client_id": "100000000000000000001",
            "token_uri": token_uri,
        }
    ).encode()
