"""Checking a Bedrock short-term API key as AWS would: its presigned request's SigV4
signature recomputed by botocore (AWS's own signer) from the key's own fields and the
credentials it claims to be signed with. And AWS credentials to sign with, made fresh for
each test (never real ones)."""

from __future__ import annotations

import base64
import hmac
import secrets
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlsplit

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PREFIX = "bedrock-api-key-"


@dataclass(frozen=True)
class PresignedKey:
    """What a key says about itself."""

    host: str
    path: str
    parameters: dict[str, str]
    version: str

    @property
    def signed_at(self) -> datetime:
        return datetime.strptime(self.parameters["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
            tzinfo=UTC
        )

    @property
    def lifetime_s(self) -> int:
        return int(self.parameters["X-Amz-Expires"])

    @property
    def scope(self) -> list[str]:
        """access key id, date, region, service, aws4_request"""
        return self.parameters["X-Amz-Credential"].split("/")


def decode(token: str) -> PresignedKey:
    assert token.startswith(PREFIX), "a Bedrock API key starts with bedrock-api-key-"
    url = "https://" + base64.b64decode(token[len(PREFIX) :], validate=True).decode()
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    assert pairs[-1][0] == "Version", "the version comes last, after the signature"
    parameters = dict(pairs[:-1])
    assert len(parameters) == len(pairs) - 1, "no parameter twice"
    return PresignedKey(parts.hostname or "", parts.path, parameters, pairs[-1][1])


@dataclass(frozen=True)
class AwsKeys:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def entries(self, region: str | None = None) -> dict[str, bytes]:
        """As a Secret holds them, under AWS's environment variable names."""
        found = {
            "AWS_ACCESS_KEY_ID": self.access_key_id.encode(),
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key.encode() + b"\n",
        }
        if self.session_token is not None:
            found["AWS_SESSION_TOKEN"] = self.session_token.encode()
        if region is not None:
            found["AWS_REGION"] = region.encode()
        return found


def new_keys(*, session: bool = True, marker: str = "grid-canary") -> AwsKeys:
    """Fresh credentials of AWS's shapes; the secret parts carry ``marker`` and the
    characters SigV4 must percent-encode (``+``, ``/``, ``=``)."""
    alphabet = string.ascii_uppercase + string.digits
    access_key_id = "ASIA" + "".join(secrets.choice(alphabet) for _ in range(16))
    secret = f"{marker}-{secrets.token_hex(12)}/+{secrets.token_hex(4)}"
    token = f"{marker}-session-{secrets.token_hex(24)}+/=="
    return AwsKeys(access_key_id, secret, token if session else None)


def signature_holds(token: str, keys: AwsKeys) -> bool:
    """Whether ``token``'s signature is the one botocore computes for its request (all its
    parameters but the signature) with ``keys``, at its date, for its region and expiry."""
    key = decode(token)
    access_key_id, _, region, service, _ = key.scope
    # AWS takes the session from the key itself: it must be the one of these credentials.
    session = key.parameters.get("X-Amz-Security-Token")
    if access_key_id != keys.access_key_id or session != keys.session_token:
        return False
    signed = {name: value for name, value in key.parameters.items() if name != "X-Amz-Signature"}
    request = AWSRequest(
        method="POST",
        url=f"https://{key.host}{key.path}",
        headers={"host": key.host},
        params=signed,
    )
    request.context["timestamp"] = key.parameters["X-Amz-Date"]
    signer = SigV4QueryAuth(
        Credentials(keys.access_key_id, keys.secret_access_key, keys.session_token),
        service,
        region,
        expires=key.lifetime_s,
    )
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, key.parameters["X-Amz-Signature"])


def botocore_key(keys: AwsKeys, region: str, lifetime_s: int) -> str:
    """The key as AWS's token generator makes it: botocore presigns the request now."""
    request = AWSRequest(
        method="POST",
        url="https://bedrock.amazonaws.com/",
        headers={"host": "bedrock.amazonaws.com"},
        params={"Action": "CallWithBearerToken"},
    )
    credentials = Credentials(keys.access_key_id, keys.secret_access_key, keys.session_token)
    SigV4QueryAuth(credentials, "bedrock", region, expires=lifetime_s).add_auth(request)
    presigned = request.url.removeprefix("https://") + "&Version=1"
    return PREFIX + base64.b64encode(presigned.encode()).decode()
