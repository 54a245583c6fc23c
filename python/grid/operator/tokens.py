"""How the operator's minters (:class:`~grid.runtime.minters.TokenMinters`) obtain and
write tokens: an Oauth2 provider's from its Secret and a Sigv4 provider's Bedrock API key
from the AWS credentials in its Secret, read through the Kubernetes API (a Custom
provider's value is rendered from its Secret and written the same way); a
ServiceAccount provider's from the TokenRequest API (``serviceaccounts/token``, for the
provider's audience), exchanged at its STS when it names one. The token goes to the Secret
``grid-token-<provider>`` (beside the Oauth2 or Sigv4 provider's Secret, in the ServiceAccount's
namespace: where the gateway mounts its credentials from), one key per token
(``token-<issued-at>``), which the gateway configuration and the overlay's reference name
once the kubelet has had time to sync it (:mod:`grid.oauth.rotation`). The operator creates
that Secret with Grid's labels and adds a key at each refresh, removing all but the
previous one and those the gateway is told about; a Secret of that name without the labels
is never overwritten (the provider's ``CredentialsValid`` says so)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime

import aiohttp

from grid.errors import CredentialMaterialError, KubernetesApiError, TokenEndpointError
from grid.models.service_account import ServiceAccountSettings
from grid.oauth.bedrock import BedrockTokenSettings
from grid.oauth.custom import CustomValueSettings
from grid.oauth.exchange import parse_token_request
from grid.oauth.responses import AccessToken
from grid.oauth.rotation import key_issued_at
from grid.operator.kube import KubeApi
from grid.runtime.minters import MinterIo, ValueIo
from grid.runtime.tokens import (
    Mint,
    MintingPlan,
    SecretEntries,
    SecretSource,
    TokenSink,
    exchange_token,
    oauth2_mint,
    sigv4_mint,
)

MINTED_LABELS = {
    "app.kubernetes.io/managed-by": "grid",
    "grid.praxis-proxy.io/credential": "minted-token",
}
"""What marks a Secret as one the operator writes tokens to."""


def operator_io(kube: KubeApi) -> MinterIo:
    def io(plan: MintingPlan) -> tuple[Mint, TokenSink]:
        namespace, name, _ = plan.output
        sink = TokenSecret(kube, namespace, name)
        if isinstance(plan.settings, ServiceAccountSettings):
            return service_account_mint(kube, plan.settings), sink
        if plan.secret is None:
            raise ValueError("an Oauth2 or Sigv4 plan names the Secret it mints from")
        namespace, name, key = plan.secret
        if isinstance(plan.settings, BedrockTokenSettings):
            return sigv4_mint(plan.settings, key, secret_entries(kube, namespace, name)), sink
        if isinstance(plan.settings, CustomValueSettings):
            raise ValueError("a Custom value is rendered (operator_values), not minted")
        return oauth2_mint(plan.settings, secret_source(kube, namespace, name, key)), sink

    return io


def operator_values(kube: KubeApi) -> ValueIo:
    """Where a Custom provider's value is rendered from and written to: its Secret, read
    through the API, and ``grid-token-<provider>`` beside it, as an Oauth2 token is."""

    def io(plan: MintingPlan) -> tuple[SecretEntries, TokenSink]:
        if plan.secret is None:
            raise ValueError("a Custom plan names the Secret it renders from")
        namespace, name, _ = plan.secret
        output_namespace, output_name, _ = plan.output
        return (
            secret_entries(kube, namespace, name),
            TokenSecret(kube, output_namespace, output_name),
        )

    return io


def service_account_mint(kube: KubeApi, settings: ServiceAccountSettings) -> Mint:
    """Asks the API server for a token of the ServiceAccount, for its audience and life,
    and trades it at the STS when ``settings.exchange`` names one."""
    account = f"{settings.namespace}/{settings.name}"

    async def mint(now: datetime, session: aiohttp.ClientSession | None) -> AccessToken:
        try:
            answer = await kube.request_token(
                settings.namespace,
                settings.name,
                settings.audience,
                settings.expiration_seconds,
            )
        except KubernetesApiError as error:
            # No answer, or the server's own trouble: the issuer cannot be asked. Any other
            # refusal (403: no grid-operator-token-requester binding) is the issuer's word.
            unreachable = error.status == 0 or error.status >= 500
            hint = ""
            if error.status == 403:
                hint = " (bind grid-operator-token-requester in that namespace)"
            raise TokenEndpointError(f"{error}{hint}", unreachable=unreachable) from None
        if answer is None:
            raise TokenEndpointError(f"the ServiceAccount {account} does not exist")
        subject = parse_token_request(answer, now)
        del answer
        if settings.exchange is None:
            return subject
        return await exchange_token(settings.exchange, subject, session)

    return mint


def secret_source(kube: KubeApi, namespace: str, name: str, key: str) -> SecretSource:
    """Reads the entry at each attempt (a rotated Secret is used from the next one on)."""

    async def read() -> bytes:
        data = await _secret_data(kube, namespace, name)
        encoded = data.get(key)
        del data  # the other entries are not this provider's business
        if encoded is None:
            raise CredentialMaterialError("the Secret has no entry for spec.auth.secretRef.key")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise CredentialMaterialError("the Secret's entry is not base64") from None
        if not value:
            raise CredentialMaterialError("the credential in the Secret is empty")
        return value

    return read


def secret_entries(kube: KubeApi, namespace: str, name: str) -> SecretEntries:
    """Reads the named entries the Secret has, at each attempt; the others are dropped
    undecoded."""

    async def read(keys: tuple[str, ...]) -> dict[str, bytes]:
        data = await _secret_data(kube, namespace, name)
        found = {}
        for key in keys:
            encoded = data.get(key)
            if encoded is None:
                continue
            try:
                found[key] = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise CredentialMaterialError(f"the Secret's entry {key} is not base64") from None
        del data
        return found

    return read


async def _secret_data(kube: KubeApi, namespace: str, name: str) -> Mapping[str, str]:
    try:
        data = await kube.read_secret(namespace, name)
    except KubernetesApiError as error:
        raise CredentialMaterialError(str(error)) from None
    if data is None:
        raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
    return data


class TokenSecret:
    """A provider's tokens as keys of the Secret ``grid-token-<provider>``, one per token
    (``token-<issued-at>``)."""

    def __init__(self, kube: KubeApi, namespace: str, name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name

    async def keys(self) -> tuple[str, ...]:
        data = await self._kube.read_secret(self._namespace, self._name)
        keys = tuple(sorted(data or ()))
        del data  # the values are the tokens
        return keys

    async def write(self, key: str, token: str, keep: frozenset[str]) -> None:
        encoded = base64.b64encode(token.encode()).decode()
        await self._kube.put_owned_secret(
            self._namespace,
            self._name,
            MINTED_LABELS,
            {key: encoded},
            drop=lambda held: held not in keep and key_issued_at(held) is not None,
        )
