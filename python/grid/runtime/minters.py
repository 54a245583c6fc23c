"""One network's minters run together: a :class:`~grid.runtime.tokens.TokenMinter` per
provider whose tokens this site mints (Oauth2, ServiceAccount, Sigv4) and a
:class:`~grid.runtime.custom_values.ValueRenderer` per Custom provider whose value it
renders, each attempted when due, the shell woken at every outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Protocol

import aiohttp

from grid.models.phases import CredentialState
from grid.models.provider import InferenceProvider
from grid.oauth.custom import CustomValueSettings
from grid.oauth.rotation import AGENT_SETTLE, Settle, TokenKeys
from grid.runtime.custom_values import AGENT_RECHECK_S, ValueRenderer, custom_render
from grid.runtime.tokens import (
    Mint,
    MintingPlan,
    SecretEntries,
    TokenMinter,
    TokenSink,
    minting_plan,
)

IDLE_WAIT_S = 60.0
"""Longest wait between two looks at the minters (a change of providers wakes them sooner)."""

MinterIo = Callable[[MintingPlan], tuple[Mint, TokenSink]]
"""How a shell obtains a plan's tokens and where it writes them."""
ValueIo = Callable[[MintingPlan], tuple[SecretEntries, TokenSink]]
"""How a shell reads a Custom plan's Secret and where it writes the value."""


class Minter(Protocol):
    """What the loop asks of a token minter and of a value renderer alike."""

    plan: MintingPlan

    @property
    def next_attempt_at(self) -> datetime | None: ...

    def due(self, now: datetime) -> bool: ...

    def expires_at(self, now: datetime) -> datetime | None: ...

    def verdict(self, now: datetime) -> tuple[CredentialState, str]: ...

    def keys(self, now: datetime) -> TokenKeys | None: ...

    def next_key_change(self, now: datetime) -> datetime | None: ...

    async def attempt(
        self, now: datetime, session: aiohttp.ClientSession | None = None
    ) -> None: ...

    def fail_unexpectedly(self, error: str, now: datetime) -> None: ...


class TokenMinters:
    """The minters of one network's providers: :meth:`follow` them, run :meth:`loop`,
    ask :meth:`verdict` at each engine pass (so a token that lapsed since withdraws its
    provider then, even when nothing else happened)."""

    def __init__(
        self,
        io: MinterIo,
        values: ValueIo,
        session: aiohttp.ClientSession | None,
        *,
        where: str,
        on_change: Callable[[], None],
        now: Callable[[], datetime],
        settle: Settle = AGENT_SETTLE,
        recheck_s: float = AGENT_RECHECK_S,
    ) -> None:
        self._io = io
        self._values = values
        self._session = session
        self._where = where
        self._on_change = on_change
        self._now = now
        self._settle = settle
        self._recheck_s = recheck_s
        self._minters: dict[str, Minter] = {}
        self._changed = asyncio.Event()

    def follow(self, providers: Iterable[InferenceProvider]) -> None:
        """Mint for these providers (this site's own): one whose settings or Secret
        reference changed gets a new minter, which asks for a token at once."""
        minters: dict[str, Minter] = {}
        for provider in providers:
            plan = minting_plan(provider)
            if plan is None:
                continue
            name = provider.metadata.name
            current = self._minters.get(name)
            if current is not None and current.plan == plan:
                minters[name] = current
                continue
            minters[name] = self._minter(f"{self._where} {name}", plan)
        if minters != self._minters:
            self._minters = minters
            self._changed.set()

    def _minter(self, provider: str, plan: MintingPlan) -> Minter:
        if isinstance(plan.settings, CustomValueSettings):
            read, sink = self._values(plan)
            render = custom_render(plan.settings, read)
            return ValueRenderer(
                provider, plan, render, sink, recheck_s=self._recheck_s, settle=self._settle
            )
        mint, token_sink = self._io(plan)
        return TokenMinter(provider, plan, mint, token_sink, settle=self._settle)

    def minting(self, provider: str) -> bool:
        return provider in self._minters

    def providers(self) -> tuple[str, ...]:
        """The providers minted for, whose credential state is :meth:`verdict`'s."""
        return tuple(self._minters)

    def verdict(self, provider: str, now: datetime) -> tuple[CredentialState, str]:
        return self._minters[provider].verdict(now)

    def token_keys(self, now: datetime) -> dict[str, TokenKeys]:
        """Per provider with a token written, the keys the gateway is told about at ``now``
        (:mod:`grid.oauth.rotation`)."""
        found = {}
        for name, minter in self._minters.items():
            keys = minter.keys(now)
            if keys is not None:
                found[name] = keys
        return found

    def expiries(self, now: datetime) -> dict[str, datetime]:
        """When each provider's valid token lapses (none for a provider without one, nor
        for a rendered value, which does not lapse)."""
        found = {}
        for name, minter in self._minters.items():
            expires_at = minter.expires_at(now)
            if expires_at is not None:
                found[name] = expires_at
        return found

    async def loop(self) -> None:
        """Attempt every due minter, then sleep until the next attempt is due, a token
        lapses, the keys the gateway is told about change, or the providers change; every
        outcome calls ``on_change``."""
        while True:
            now = self._now()
            due = [m for m in self._minters.values() if m.due(now)]
            if due:
                outcomes = await asyncio.gather(
                    *(m.attempt(now, self._session) for m in due), return_exceptions=True
                )
                for minter, outcome in zip(due, outcomes, strict=True):
                    if isinstance(outcome, Exception):
                        # A bug must not stop the other providers' refreshes; the type only
                        # (the message could quote what the attempt handled).
                        minter.fail_unexpectedly(type(outcome).__name__, now)
                self._on_change()
                continue
            wait = IDLE_WAIT_S
            for minter in self._minters.values():
                moments = [
                    minter.next_attempt_at,
                    minter.next_key_change(now),
                    minter.expires_at(now),  # the provider is withdrawn then
                ]
                for moment in moments:
                    if moment is not None:
                        wait = min(wait, max((moment - now) / timedelta(seconds=1), 0.0))
            self._changed.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                self._on_change()
