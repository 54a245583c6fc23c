"""Where the agent's minters (:class:`~grid.runtime.minters.TokenMinters`) read and write:
an Oauth2, Sigv4 or Custom provider's Secret from ``--secrets-dir`` (``<namespace>/<name>/<key>``,
as every provider's Secret; a Sigv4 provider's AWS credentials are several entries of it),
and its tokens (a Custom provider's rendered values) to ``<state-dir>/credentials/<namespace>/
grid-token-<provider>/token-<issued-at>`` (the same layout), one file per token, where the gateway
reads them as its configuration and the overlay's reference say
(:mod:`grid.oauth.rotation`). A token file is written in one step (readers see all of it or
nothing) and is readable by its owner only; the previous token's file stays until the next
token is written, older ones are removed.

A ServiceAccount provider's tokens are not minted here: the TokenRequest API is the
operator's, and the agent has no Kubernetes API. Such a provider is withdrawn at an agent's
site, its ``CredentialsValid`` saying so (SecretUnusable, :data:`NO_TOKEN_REQUEST`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import aiohttp

from grid.errors import CredentialMaterialError
from grid.fsutil import write_atomically
from grid.models.service_account import ServiceAccountSettings
from grid.oauth.bedrock import BedrockTokenSettings
from grid.oauth.custom import CustomValueSettings
from grid.oauth.responses import AccessToken
from grid.oauth.rotation import key_issued_at
from grid.runtime.minters import MinterIo, ValueIo
from grid.runtime.tokens import (
    Mint,
    MintingPlan,
    SecretEntries,
    SecretSource,
    TokenSink,
    oauth2_mint,
    sigv4_mint,
)

TOKEN_FILE_MODE = 0o600
CREDENTIALS_DIR = "credentials"
NO_TOKEN_REQUEST = (
    "ServiceAccount tokens are minted by the operator (TokenRequest); the agent has no "
    "Kubernetes API"
)


def token_dir(state_dir: Path, plan: MintingPlan) -> Path:
    """The directory a provider's token files are written to: the Secret's, as the gateway
    mounts it (``<credentialMountBase>/<name>/``)."""
    namespace, name, _ = plan.output
    return state_dir / CREDENTIALS_DIR / namespace / name


def agent_io(state_dir: Path, secrets_dir: Path | None) -> MinterIo:
    def io(plan: MintingPlan) -> tuple[Mint, TokenSink]:
        sink = TokenFiles(token_dir(state_dir, plan))
        if isinstance(plan.settings, ServiceAccountSettings) or plan.secret is None:
            return no_token_request, sink
        namespace, name, key = plan.secret
        if isinstance(plan.settings, BedrockTokenSettings):
            entries = secret_entries(secrets_dir, namespace, name)
            return sigv4_mint(plan.settings, key, entries), sink
        if isinstance(plan.settings, CustomValueSettings):
            raise ValueError("a Custom value is rendered (agent_values), not minted")
        return oauth2_mint(plan.settings, secret_source(secrets_dir, namespace, name, key)), sink

    return io


def agent_values(state_dir: Path, secrets_dir: Path | None) -> ValueIo:
    """Where a Custom provider's value is rendered from and written to: its Secret's files
    in ``--secrets-dir``, and a file per value where tokens go."""

    def io(plan: MintingPlan) -> tuple[SecretEntries, TokenSink]:
        if plan.secret is None:
            raise ValueError("a Custom plan names the Secret it renders from")
        namespace, name, _ = plan.secret
        return secret_entries(secrets_dir, namespace, name), TokenFiles(token_dir(state_dir, plan))

    return io


async def no_token_request(now: datetime, session: aiohttp.ClientSession | None) -> AccessToken:
    del now, session
    raise CredentialMaterialError(NO_TOKEN_REQUEST)


def secret_source(secrets_dir: Path | None, namespace: str, name: str, key: str) -> SecretSource:
    """Reads ``<secrets_dir>/<namespace>/<name>/<key>`` at each attempt (a rotated Secret
    is used from the next one on)."""

    async def read() -> bytes:
        secret = _secret_dir(secrets_dir, namespace, name)
        try:
            data = (secret / key).read_bytes()
        except OSError:
            raise CredentialMaterialError(
                "the Secret has no readable entry for spec.auth.secretRef.key"
            ) from None
        if not data:
            raise CredentialMaterialError("the credential in the Secret is empty")
        return data

    return read


def secret_entries(secrets_dir: Path | None, namespace: str, name: str) -> SecretEntries:
    """Reads the named entries ``<secrets_dir>/<namespace>/<name>`` has, at each attempt."""

    async def read(keys: tuple[str, ...]) -> dict[str, bytes]:
        secret = _secret_dir(secrets_dir, namespace, name)
        found = {}
        for key in keys:
            try:
                found[key] = (secret / key).read_bytes()
            except FileNotFoundError:
                continue
            except OSError:
                raise CredentialMaterialError(f"the Secret's entry {key} is not readable") from None
        return found

    return read


def _secret_dir(secrets_dir: Path | None, namespace: str, name: str) -> Path:
    if secrets_dir is None:
        raise CredentialMaterialError(
            "the agent has no --secrets-dir to read the provider's Secret from"
        )
    secret = secrets_dir / namespace / name
    if not secret.is_dir():
        raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
    return secret


class TokenFiles:
    """A provider's token files, one per token (``token-<issued-at>``), in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def keys(self) -> tuple[str, ...]:
        try:
            return tuple(sorted(entry.name for entry in self.directory.iterdir()))
        except FileNotFoundError:
            return ()

    async def write(self, key: str, token: str, keep: frozenset[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.directory / key, token.encode(), TOKEN_FILE_MODE)
        for entry in await self.keys():
            if entry != key and entry not in keep and key_issued_at(entry) is not None:
                (self.directory / entry).unlink(missing_ok=True)
