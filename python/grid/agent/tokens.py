"""The access tokens the agent mints for one network's Oauth2 providers: one
:class:`~grid.runtime.tokens.TokenMinter` per provider this site observes, fed from
``--secrets-dir`` (``<namespace>/<name>/<key>``, as for every provider's Secret) and
writing each token to ``<state-dir>/credentials/<namespace>/grid-token-<provider>/token``
(the same layout), where the gateway reads it as the overlay's reference says.

A token file is replaced in one step (readers see the old token or the new one, never a
mix) and is readable by its owner only. The provider's credential state is the minter's
verdict at the time it is asked, so a token that lapses withdraws the provider at the next
refresh of the engine even when nothing else happens."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path

import aiohttp

from grid.errors import CredentialMaterialError
from grid.fsutil import write_atomically
from grid.models.common import AuthStrategy
from grid.models.oauth2 import MINTED_TOKEN_KEY, minted_token_secret
from grid.models.phases import CredentialState
from grid.models.provider import InferenceProvider
from grid.runtime.tokens import MintingPlan, SecretSource, TokenMinter, TokenSink

TOKEN_FILE_MODE = 0o600
CREDENTIALS_DIR = "credentials"
IDLE_WAIT_S = 60.0
"""Longest wait between two looks at the minters (a new provider wakes the loop sooner)."""

_log = logging.getLogger("grid.agent")


def minting_plan(provider: InferenceProvider) -> MintingPlan | None:
    """What minting ``provider``'s tokens takes, or None when the site mints none for it."""
    auth = provider.spec.auth
    if auth is None or auth.strategy is not AuthStrategy.OAUTH2:
        return None
    if auth.oauth2 is None or auth.secret_ref is None:
        return None
    ref = auth.secret_ref
    output = (ref.namespace, minted_token_secret(provider.metadata.name), MINTED_TOKEN_KEY)
    return MintingPlan(auth.oauth2, (ref.namespace, ref.name, ref.key), output)


def secret_source(secrets_dir: Path | None, namespace: str, name: str, key: str) -> SecretSource:
    """Reads ``<secrets_dir>/<namespace>/<name>/<key>`` at each attempt (a rotated Secret
    is used from the next one on)."""

    def read() -> bytes:
        if secrets_dir is None:
            raise CredentialMaterialError(
                "the agent has no --secrets-dir to read the provider's Secret from"
            )
        secret = secrets_dir / namespace / name
        if not secret.is_dir():
            raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
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


def token_sink(path: Path) -> TokenSink:
    def write(token: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, token.encode(), TOKEN_FILE_MODE)

    return write


class AgentTokens:
    """The minters of one network: :meth:`follow` the providers, run :meth:`loop`, ask
    :meth:`verdict`."""

    def __init__(
        self,
        state_dir: Path,
        secrets_dir: Path | None,
        session: aiohttp.ClientSession,
        *,
        where: str,
        on_change: Callable[[], None],
        now: Callable[[], datetime],
    ) -> None:
        self._base = state_dir / CREDENTIALS_DIR
        self._secrets_dir = secrets_dir
        self._session = session
        self._where = where
        self._on_change = on_change
        self._now = now
        self._minters: dict[str, TokenMinter] = {}
        self._changed = asyncio.Event()

    def token_path(self, plan: MintingPlan) -> Path:
        namespace, name, key = plan.output
        return self._base / namespace / name / key

    def follow(self, providers: Iterable[InferenceProvider]) -> None:
        """Mint for these providers (this site's own): a provider whose settings or Secret
        reference changed gets a new minter, which asks for a token at once."""
        minters: dict[str, TokenMinter] = {}
        for provider in providers:
            plan = minting_plan(provider)
            if plan is None:
                continue
            name = provider.metadata.name
            current = self._minters.get(name)
            if current is not None and current.plan == plan:
                minters[name] = current
                continue
            namespace, secret, key = plan.secret
            minters[name] = TokenMinter(
                f"{self._where} {name}",
                plan,
                secret_source(self._secrets_dir, namespace, secret, key),
                token_sink(self.token_path(plan)),
            )
        self._minters = minters
        self._changed.set()

    def minting(self, provider: str) -> bool:
        return provider in self._minters

    def verdict(self, provider: str, now: datetime) -> tuple[CredentialState, str]:
        return self._minters[provider].health.verdict(now)

    def expiries(self, now: datetime) -> dict[str, datetime]:
        """When each provider's valid token lapses (none for a provider without one)."""
        found = {}
        for name, minter in self._minters.items():
            token = minter.health.valid_token(now)
            if token is not None:
                found[name] = token.expires_at
        return found

    async def loop(self) -> None:
        """Attempt every due minter, then sleep until the next is due (or a provider
        changes); every outcome wakes the engine's refresh."""
        while True:
            now = self._now()
            due = [m for m in self._minters.values() if m.health.due(now)]
            if due:
                await asyncio.gather(*(m.attempt(now, self._session) for m in due))
                self._on_change()
                continue
            wait = IDLE_WAIT_S
            for minter in self._minters.values():
                at = minter.health.next_attempt_at
                if at is not None:
                    wait = min(wait, max((at - now) / timedelta(seconds=1), 0.0))
                token = minter.health.valid_token(now)
                if token is not None:
                    # Wake when it lapses too: the provider is withdrawn then.
                    wait = min(wait, max((token.expires_at - now) / timedelta(seconds=1), 0.0))
            self._changed.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                self._on_change()
