"""A real OAuth 2.0 token endpoint for the tests, on aiohttp's server, that checks what a
client sends as an authorization server would and answers as the test tells it to.

It serves the client-credentials grant (RFC 6749 section 4.4) to a client authenticated by
HTTP Basic with its secret or by a private-key JWT (RFC 7523 section 2.2), the JWT-bearer
grant (RFC 7523 section 2.1) to a Google-style service account, and, as a security token
service, the token exchange of RFC 8693 for a JWT subject token (kept in
:attr:`TokenServer.subjects` for the test to check who issued it). Assertions are verified with
PyJWT against the public keys the test registers: signature, ``iss``/``sub``, ``aud`` (the
endpoint's own URL), ``exp``, and ``jti`` never seen before (a replay is refused).

Every good request gets a fresh random token (rotation); :attr:`TokenServer.mode` turns the
endpoint into one that refuses (and echoes the client's credentials back in its error body,
as careless servers do), answers garbage, answers slowly, or fails with a 500.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"


class Mode(StrEnum):
    SERVE = "serve"
    REFUSE = "refuse"
    """400 invalid_client, the request's credentials echoed in error_description."""
    GARBAGE = "garbage"
    """200 with an HTML page."""
    NO_TOKEN = "no_token"
    """200 with JSON that has no access_token."""
    SLOW = "slow"
    """Answers after :attr:`TokenServer.slow_s`."""
    FAIL = "fail"
    """500 with the form echoed back in the body."""


@dataclass
class Issued:
    token: str
    client: str
    scope: str
    audience: str | None
    at: float = field(default_factory=time.time)
    """When it was issued (Unix time)."""


@dataclass
class TokenServer:
    """Start with :meth:`start`; :attr:`url` is the token endpoint."""

    expires_in: float | str | None = 3600
    mode: Mode = Mode.SERVE
    slow_s: float = 30.0
    client_secrets: dict[str, str] = field(default_factory=dict)
    client_keys: dict[str, PublicKeyTypes] = field(default_factory=dict)
    service_accounts: dict[str, PublicKeyTypes] = field(default_factory=dict)
    issued: list[Issued] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """Why each refused request was refused (the server's own view, for assertions)."""
    requests: int = 0
    subjects: list[str] = field(default_factory=list)
    """The subject tokens of the exchanges served, in order."""
    _seen_jti: set[str] = field(default_factory=set)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/token", self._token)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/token"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def tokens(self) -> list[str]:
        return [entry.token for entry in self.issued]

    async def _token(self, request: web.Request) -> web.Response:
        self.requests += 1
        form = dict(await request.post())
        if self.mode is Mode.SLOW:
            await asyncio.sleep(self.slow_s)
        if self.mode is Mode.FAIL:
            return web.Response(status=500, text=f"internal error handling {form!r}")
        if self.mode is Mode.GARBAGE:
            return web.Response(
                status=200, text="<html>maintenance</html>", content_type="text/html"
            )
        try:
            client, scope, audience = self._check(request, {k: str(v) for k, v in form.items()})
        except Refused as refused:
            self.refusals.append(str(refused))
            return web.json_response(
                {
                    "error": refused.code,
                    "error_description": f"{refused} (request: {form!r}, "
                    f"authorization: {request.headers.get('Authorization')!r})",
                },
                status=400 if refused.code != "invalid_client" else 401,
            )
        if self.mode is Mode.REFUSE:
            self.refusals.append("refusing on purpose")
            return web.json_response(
                {
                    "error": "invalid_client",
                    "error_description": f"client refused; you sent {form!r} with "
                    f"{request.headers.get('Authorization')!r}",
                },
                status=401,
            )
        if self.mode is Mode.NO_TOKEN:
            return web.json_response({"token_type": "Bearer", "expires_in": 3600})
        token = "at-" + secrets.token_urlsafe(32)
        self.issued.append(Issued(token, client, scope, audience))
        answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return web.json_response(answer)

    def _check(self, request: web.Request, form: dict[str, str]) -> tuple[str, str, str | None]:
        grant = form.get("grant_type")
        audience = form.get("audience")
        if grant == "client_credentials":
            return self._client(request, form), form.get("scope", ""), audience
        if grant == JWT_BEARER:
            claims = self._verify(form.get("assertion", ""), self.service_accounts, "iss")
            return str(claims["iss"]), str(claims.get("scope", "")), audience
        if grant == TOKEN_EXCHANGE:
            return self._exchange(form), form.get("scope", ""), audience
        raise Refused("unsupported_grant_type", f"grant {grant!r}")

    def _exchange(self, form: dict[str, str]) -> str:
        """RFC 8693 section 2.1: a JWT subject token, decoded (its issuer's signature is for
        the test to check, with the issuer); the client is the token's subject."""
        if form.get("subject_token_type") != JWT_TOKEN_TYPE:
            raise Refused("invalid_request", "subject_token_type is not a JWT")
        subject = form.get("subject_token", "")
        try:
            claims = jwt.decode(subject, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            raise Refused("invalid_request", f"subject_token: {error}") from None
        self.subjects.append(subject)
        return str(claims.get("sub", ""))

    def _client(self, request: web.Request, form: dict[str, str]) -> str:
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            decoded = base64.b64decode(header.removeprefix("Basic ")).decode()
            client, _, secret = decoded.partition(":")
            client, secret = unquote(client), unquote(secret)
            if self.client_secrets.get(client) != secret:
                raise Refused("invalid_client", "wrong client secret")
            return client
        if form.get("client_assertion_type") == CLIENT_ASSERTION_TYPE:
            claims = self._verify(form.get("client_assertion", ""), self.client_keys, "sub")
            if claims["iss"] != claims["sub"] or form.get("client_id") != claims["sub"]:
                raise Refused("invalid_client", "iss, sub and client_id differ")
            return str(claims["sub"])
        raise Refused("invalid_client", "no client authentication")

    def _verify(self, assertion: str, keys: dict[str, PublicKeyTypes], who: str) -> dict[str, Any]:
        try:
            unverified = jwt.decode(assertion, options={"verify_signature": False})
            key = keys[unverified[who]]
            claims: dict[str, Any] = jwt.decode(
                assertion,
                key,  # type: ignore[arg-type]
                algorithms=["RS256", "ES256"],
                audience=self.url,
                options={"require": ["iss", "aud", "exp", "iat", "jti"]},
            )
        except (jwt.PyJWTError, KeyError) as error:
            raise Refused("invalid_grant", f"assertion refused: {error}") from None
        if claims["jti"] in self._seen_jti:
            raise Refused("invalid_grant", "assertion replayed")
        self._seen_jti.add(claims["jti"])
        return claims


class Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
